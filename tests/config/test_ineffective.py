"""Settings that change nothing in their scenario get one warning line each (issue 49)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mecsim.commands.cli import main

QUICKSTART = str(Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.toml")


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        ("network.handover_margin_db=5", "network.handover_margin_db has no effect"),
        ("network.backhaul.rate_mbps=10", "network.backhaul has no effect"),
        ('execution.ray_address="auto"', "execution.ray_address has no effect"),
        ('network.medium="stepping"', "network.medium has no effect"),
        ("data.min_classes=3", "data.min_classes has no effect"),
    ],
)
def test_a_setting_without_effect_is_one_warning_line(caplog, setting, says):
    assert main(["validate", QUICKSTART, "--set", setting]) == 0
    warnings = [m for m in caplog.messages if m.startswith("warning")]
    assert len(warnings) == 1 and says in warnings[0]


def test_defaults_spelled_out_warn_of_nothing(caplog):
    assert (
        main(
            [
                "validate",
                QUICKSTART,
                "--set",
                "network.handover_margin_db=3.0",
                "--set",
                "network.backhaul.rate_mbps=1000",
            ]
        )
        == 0
    )  # fmt: skip  (the defaults)
    assert not [m for m in caplog.messages if m.startswith("warning")]


def test_more_threads_than_cpus_is_one_warning_line(caplog, monkeypatch):
    import torch

    from mecsim.common import threads

    monkeypatch.setattr(threads, "usable_cpus", lambda: 2)
    before = torch.get_num_threads()
    try:
        assert threads.apply_threads(64) == 64
        warned = [m for m in caplog.messages if m.startswith("warning")]
        caplog.clear()
        threads.apply_threads(2)  # as many as there are: no warning
    finally:
        torch.set_num_threads(before)
    assert len(warned) == 1 and "execution.threads = 64" in warned[0] and "2 CPUs" in warned[0]
    assert not [m for m in caplog.messages if m.startswith("warning")]
