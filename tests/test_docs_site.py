"""The documentation site (issue 51, item 9): ``mkdocs build --strict`` succeeds, so a
broken link, a page missing from the navigation's files or an unresolvable API entry
fails the suite; every guide is in the navigation; the README's links resolve."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=300,
    )  # fmt: skip


def _nav_files(nav) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [f for value in nav.values() for f in _nav_files(value)]
    return [f for item in nav for f in _nav_files(item)]


def _config() -> dict:
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text())


def test_the_site_builds_strictly_with_its_api_reference(tmp_path):
    done = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stderr[-3000:]
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    for name in ("RunRecord", "energy_breakdown", "SchedulingPolicy", "load_scenario"):
        assert name in api
    assert (tmp_path / "site" / "examples" / "index.html").is_file()


def test_every_guide_is_in_the_navigation():
    listed = set(_nav_files(_config()["nav"]))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages == listed


def test_a_broken_link_fails_the_strict_build(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    page = docs / "comparing.md"
    page.write_text(page.read_text() + "\nSee [the lost page](no-such-page.md).\n")
    config = (ROOT / "mkdocs.yml").read_text().replace("docs_dir: docs", f"docs_dir: {docs}")
    config = config.replace("paths: [.]", f"paths: [{ROOT}]")
    (tmp_path / "mkdocs.yml").write_text(config)
    done = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0 and "no-such-page.md" in done.stdout + done.stderr


def test_the_readmes_links_resolve():
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#]+)\)", readme)
    local = [t for t in targets if not t.startswith("http")]
    assert local and all((ROOT / t).is_file() for t in local), local


@pytest.mark.parametrize("page", ["README.md"])
def test_the_readme_is_a_first_hours_guide(page):
    text = (ROOT / page).read_text()
    assert len(text.splitlines()) < 150
    for heading in ("## Quickstart", "## What a run is", "## A first study", "## Where to go next"):
        assert heading in text


def test_the_worked_examples_scenarios_validate_and_their_commands_name_real_files(capsys):
    from mecsim.commands.cli import main

    examples = ROOT / "docs" / "examples.md"
    text = examples.read_text()
    scenarios = re.findall(r"--scenario (\S+\.toml)", text)
    assert len(scenarios) >= 5
    for path in sorted(set(scenarios)):
        assert main(["validate", str(ROOT / path)]) == 0, path
    for image in re.findall(r"!\[[^]]*\]\(([^)]+)\)", text):
        assert (examples.parent / image).is_file(), image
    headings = re.findall(r"^## \d\. ", text, re.M)
    assert len(headings) == 5
