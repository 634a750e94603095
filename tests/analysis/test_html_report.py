"""report.html is self-contained: rendered by headless Chromium with no network, it shows
the tables and the plots."""

from __future__ import annotations

import copy
import shutil
import subprocess
from html.parser import HTMLParser

import numpy as np
import pytest

import mecsim
from mecsim.commands.comparison import compare, report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def runs(tiny_module, tmp_path_factory):
    root = tmp_path_factory.mktemp("html")
    dirs = []
    for protocol in ("compute_and_wait", "wait_free"):
        overrides = [
            "algorithm.name=ditto",
            f"protocol.kind={protocol}",
            "execution.cost_only=true",
            "execution.accuracy_curve=[[0, 0.1], [0.05, 0.9]]",
        ]
        dirs.append(root / protocol)
        mecsim.run(copy.deepcopy(tiny_module), overrides, out=dirs[-1])
    return dirs


def test_the_html_report_embeds_every_figure_and_links_nothing(runs, tmp_path):
    compare(runs, [0.5], tmp_path / "cmp")
    page = (tmp_path / "cmp" / "report.html").read_text()
    # time to target, costs, accuracy and communication, scheduling
    assert page.count("<table>") == 4
    assert page.count('src="data:image/png;base64,') == 2  # curves, gantt
    assert "http://" not in page and "https://" not in page and 'src="/' not in page
    report(runs, tmp_path / "rep")
    cost = (tmp_path / "rep" / "report.html").read_text()
    # the layers uploaded per round and each run's accuracy
    assert "<table>" in cost and cost.count('src="data:image/png;base64,') == 3


def _render(page, tmp_path):
    shot = tmp_path / "shot.png"
    flags = FLAGS + [f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,2400"]
    url = page.resolve().as_uri()
    dom = subprocess.run(
        [CHROMIUM, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120
    ).stdout
    subprocess.run(
        [CHROMIUM, *flags, f"--screenshot={shot}", url], capture_output=True, timeout=120
    )
    return dom, shot


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (.ci/run installs it)")
def test_headless_chromium_shows_the_tables_and_the_plots(runs, tmp_path):
    import matplotlib.image

    compare(runs, [0.5], tmp_path / "cmp")
    dom, shot = _render(tmp_path / "cmp" / "report.html", tmp_path)
    assert dom.count("<table>") == 4 and "ditto / wait_free/window" in dom
    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.shape[:2] == (2400, 1280)
    # the plots' own colours are on screen, so both embedded images were decoded: the
    # Gantt's download, upload and personalized-training bars, and the curves' second line
    # (scaled down, so anti-aliased: a wider tolerance)
    for rgb, tolerance, least in (
        ((76, 114, 176), 12, 5000),
        ((85, 168, 104), 12, 5000),
        ((196, 78, 82), 12, 500),
        ((255, 127, 14), 40, 200),
    ):
        close = np.abs(pixels * 255 - np.array(rgb)).max(axis=-1) < tolerance
        assert close.sum() > least, rgb


def test_svg_only_figures_are_inlined_too(runs, tmp_path):
    from mecsim.commands.comparison import Figures

    compare(runs, [0.5], tmp_path / "cmp", figures=Figures(formats=["svg"]))
    page = (tmp_path / "cmp" / "report.html").read_text()
    assert page.count('src="data:image/svg+xml;base64,') == 2  # curves, gantt


class _Elements(HTMLParser):
    """Every start tag of a page, with its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag, attrs) -> None:
        self.tags.append((tag, dict(attrs)))


HOSTILE = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "[x](javascript:alert(1))"]


@pytest.fixture()
def hostile_runs(runs, tmp_path):
    """Copies of the runs whose algorithm names are markup (a scenario file or a plug-in
    chooses them)."""
    dirs = []
    for run, name in zip(runs, HOSTILE, strict=False):
        copied = tmp_path / f"hostile-{len(dirs)}"
        shutil.copytree(run, copied)
        resolved = copied / "scenario.resolved.toml"
        text = resolved.read_text().replace('name = "ditto"', f"name = {name!r}".replace("'", '"'))
        resolved.write_text(text)
        dirs.append(copied)
    return dirs


def _elements(page: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Elements()
    parser.feed(page)
    return parser.tags


def test_names_with_markup_never_become_elements_of_a_report(hostile_runs, tmp_path):
    report(hostile_runs, tmp_path / "rep")
    compare(hostile_runs, [0.5], tmp_path / "cmp")
    for page_path in (tmp_path / "rep" / "report.html", tmp_path / "cmp" / "report.html"):
        page = page_path.read_text()
        tags = _elements(page)
        assert not [t for t, _ in tags if t in ("script", "a", "iframe")]
        assert not [a for _, a in tags if any(k.startswith("on") for k in a)]
        assert all(a.get("src", "data:").startswith("data:") for t, a in tags if t == "img")
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (.ci/run installs it)")
def test_headless_chromium_creates_no_element_from_markup_in_names(hostile_runs, tmp_path):
    compare(hostile_runs, [0.5], tmp_path / "cmp")
    dom, _ = _render(tmp_path / "cmp" / "report.html", tmp_path)
    tags = _elements(dom)
    assert "table" in [t for t, _ in tags]
    assert not [t for t, _ in tags if t in ("script", "a", "iframe")]
    assert not [a for _, a in tags if any(k.startswith("on") for k in a)]
    assert "&lt;img src=x onerror=alert(1)&gt;" in dom
