"""Shared fixtures: a tiny scenario that runs in about a second."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

TINY: dict[str, Any] = {
    "name": "tiny",
    "seed": 3,
    "data": {"dataset": "digits", "partition": "dirichlet", "alpha": 1.0},
    "model": {"name": "cnn-small"},
    "algorithm": {"name": "fedavg", "steps": 3, "batch_size": 16, "lr": 0.05},
    "protocol": {"rounds": 2},
    "clients": {"count": 4},
    "output": {"progress": False},
}


@pytest.fixture
def tiny() -> dict[str, Any]:
    """A fresh copy of the tiny scenario mapping (4 clients, 2 rounds, 3 steps)."""
    return copy.deepcopy(TINY)


@pytest.fixture
def endless_file(tiny, tmp_path) -> Path:
    """The tiny scenario with 100,000 rounds, as a file: a run to stop with a signal."""
    import tomli_w

    tiny["protocol"]["rounds"] = 100_000
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(tiny))
    return path


@pytest.fixture(scope="module")
def tiny_module() -> dict[str, Any]:
    """The tiny scenario for module-scoped fixtures."""
    return copy.deepcopy(TINY)


@pytest.fixture
def refused(tmp_path, capsys):
    """``refused(scenario, overrides, field)``: ``mecsim run`` of ``scenario`` with
    ``overrides`` exits 2 before any work, naming ``field``, with no traceback and no run
    directory."""
    import tomli_w

    from mecsim.commands.cli import main

    def check(scenario: dict[str, Any], overrides: list[str], field: str) -> None:
        path = tmp_path / "s.toml"
        path.write_text(tomli_w.dumps(scenario))
        args = ["run", str(path), "--out", str(tmp_path / "run")]
        for o in overrides:
            args += ["--set", o]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert field in err and "Traceback" not in err
        assert not (tmp_path / "run").exists()

    return check


# --- the fast tier: tests measured slow are marked ``slow`` (``-m "not slow"`` skips them)

SLOW_LIST = Path(__file__).with_name("slow_tests.txt")
"""Node ids of the tests measured slow, one a line (``# seconds`` after it): written by
``pytest --record-durations FILE`` then ``python tests/slow_tier.py FILE``."""


def _slow_ids() -> set[str]:
    if not SLOW_LIST.exists():
        return set()
    lines = (line.split("#")[0].strip() for line in SLOW_LIST.read_text().splitlines())
    return {line for line in lines if line}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        metavar="FILE",
        help="write each test's seconds (setup + call + teardown) to FILE as JSON",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    slow = _slow_ids()
    for item in items:
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow)


_durations: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = session.config.getoption("--record-durations")
    if target:
        Path(target).write_text(json.dumps(_durations, indent=0, sort_keys=True))
