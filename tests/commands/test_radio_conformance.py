"""``mecsim check`` for power controls and bandwidth allocations (issue 47): every
built-in passes; a plug-in that sends above its client's maximum or hands out more band
than the cell has fails, named."""

from __future__ import annotations

import pytest

from mecsim.commands.cli import main
from mecsim.commands.radio_conformance import check_allocation, check_power_control
from mecsim.policies.allocation import ALLOCATIONS, Allocation
from mecsim.policies.power import POWER_CONTROLS, PowerControl


@pytest.mark.parametrize("name", ["fixed", "channel_inversion", "min_energy"])
def test_every_built_in_power_control_conforms(name, capsys):
    assert main(["check", name]) == 0
    out = capsys.readouterr().out
    for check in ("limits", "ledger", "executors", "cost-only", "resume"):
        assert check in out


@pytest.mark.parametrize("name", ["fcfs", "equal", "proportional", "min_max"])
def test_every_built_in_allocation_conforms(name):
    outcomes = check_allocation(name)
    assert all(o.ok for o in outcomes), [(o.check, o.problems) for o in outcomes if not o.ok]
    assert [o.check for o in outcomes] == ["split", "ledger", "executors", "cost-only", "resume"]


@pytest.fixture
def loud():
    """A plug-in power control that sends at twice its client's maximum."""

    @POWER_CONTROLS.register("twice_max", "a broken plug-in: twice the maximum")
    class TwiceMax(PowerControl):
        def power_w(self, uplink):
            return 2 * uplink.max_power_w

    yield "twice_max"
    POWER_CONTROLS.remove("twice_max")


@pytest.fixture
def greedy():
    """A plug-in allocation that gives every upload the whole band."""

    @ALLOCATIONS.register("whole_band", "a broken plug-in: the whole band to each")
    class WholeBand(Allocation):
        def bands(self, shares, total_hz):
            return [total_hz] * len(shares)

    yield "whole_band"
    ALLOCATIONS.remove("whole_band")


def test_a_power_above_the_maximum_fails_limits_and_the_ledger(loud):
    outcomes = {o.check: o for o in check_power_control(loud)}
    assert "W for an uplink of at most" in outcomes["limits"].problems[0]
    assert any("power" in p for p in outcomes["ledger"].problems)


def test_more_band_than_the_cell_has_fails_the_split_and_the_ledger(greedy):
    outcomes = {o.check: o for o in check_allocation(greedy)}
    assert "bands" in outcomes["split"].problems[0]
    assert not outcomes["ledger"].ok
