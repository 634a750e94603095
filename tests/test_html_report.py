"""report.html is self-contained: rendered by headless Chromium with no network, it shows
the tables and the plots."""

from __future__ import annotations

import copy
import shutil
import subprocess

import numpy as np
import pytest

import mecsim
from mecsim.comparison import compare, report

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
    assert page.count("<table>") == 3  # time to target, costs, accuracy and communication
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
    assert dom.count("<table>") == 3 and "ditto / wait_free/window" in dom
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
    from mecsim.comparison import Figures

    compare(runs, [0.5], tmp_path / "cmp", figures=Figures(formats=["svg"]))
    page = (tmp_path / "cmp" / "report.html").read_text()
    assert page.count('src="data:image/svg+xml;base64,') == 2  # curves, gantt
