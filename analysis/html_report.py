"""A self-contained HTML report: the Markdown tables as HTML and the figures inline
(base64), so the one file opens anywhere, offline, and can be mailed or attached."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 80em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
tr:nth-child(even) { background: #f6f6f6; }
figure { margin: 1.5em 0; }
img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.85em; color: #555; }
"""


UNSAFE_MARKDOWN = (
    "html",
    "reference",
    "link",
    "image_link",
    "image_reference",
    "short_reference",
    "short_image_ref",
    "autolink",
    "automail",
)
"""Inline Markdown that could create elements from a run's names (raw HTML, links,
images); their text is shown, escaped, instead."""


def markdown_to_html(text: str) -> str:
    """Markdown (headings, pipe tables, emphasis, code) as HTML, with raw HTML, links and
    images left as escaped text: the tables hold names from scenario files and plug-ins
    (an algorithm called ``<script>...``), which must never become markup."""
    import markdown

    md = markdown.Markdown(extensions=["tables"])
    md.preprocessors.deregister("html_block")
    for name in UNSAFE_MARKDOWN:
        md.inlinePatterns.deregister(name)
    return md.convert(text)


def render_html(
    title: str, markdown_text: str, figures: Sequence[tuple[str, Path]], appendix: str = ""
) -> str:
    """One HTML page: ``markdown_text`` (with its pipe tables; see :func:`markdown_to_html`),
    each ``(caption, image path)`` embedded as a data URI, then ``appendix`` (Markdown:
    a glossary)."""
    body = markdown_to_html(markdown_text)
    parts = []
    for caption, path in figures:
        mime = "image/svg+xml" if path.suffix == ".svg" else f"image/{path.suffix[1:]}"
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        parts.append(
            f'<figure><img alt="{html.escape(caption)}" src="data:{mime};base64,{data}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n"
        f"<body>\n{body}\n<h2>Figures</h2>\n"
        + "\n".join(parts)
        + "\n"
        + markdown_to_html(appendix)
        + "\n</body></html>\n"
    )
