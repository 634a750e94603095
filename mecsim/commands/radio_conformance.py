"""``mecsim check NAME`` for a power control or a bandwidth allocation: the conformance
suite any such policy, built-in or plug-in, must pass.

A power control (:data:`~mecsim.policies.power.POWER_CONTROLS`):

* ``limits``: on seeded random uplinks, a finite power in (0, the client's maximum],
  the same again for the same uplink (no hidden state);
* ``ledger``, ``executors``, ``cost-only``, ``resume``: see below.

A bandwidth allocation (:data:`~mecsim.policies.allocation.ALLOCATIONS`):

* ``split``: on seeded random sets of uploads, one finite band of at least 0 per upload,
  summing to at most the cell's band, the same again for the same uploads (an
  allocation that does not split, ``fcfs``, skips it);
* ``ledger``, ``executors``, ``cost-only``, ``resume``.

The run checks use the tiny scenario of :mod:`mecsim.commands.conformance` with the
policy chosen (8 clients; power controls under Rayleigh fading, allocations without
fading on a cell band of three clients' bands): ``ledger`` runs ``check-run``'s invariants on it (each upload's
power within its client's maximum, the bands on the air within the cell's band,
energies from the decided powers); ``executors`` compares the serial and the batched
executor's events and decisions, ``cost-only`` a cost-only run's with the serial
run's, ``resume`` an interrupted and resumed run with an uninterrupted one. Both kinds
see only what their client or base station knows (an :class:`~.power.Uplink`, a
:class:`~.allocation.Share`): causal by construction.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from mecsim.commands.conformance import Outcome, resume_problems
from mecsim.commands.policy_conformance import _differ, _run

RUN = ["clients.count=8", "network.fading=rayleigh", "algorithm.steps=2", "protocol.rounds=3"]
POWER_SETTINGS = {"target_snr_db": 10.0, "power_deadline_s": 2.0}
"""The ``[network.uplink]`` keys the built-in power controls read, for every check."""


def _uplinks(seed: int = 0, count: int = 40):
    from mecsim.policies.power import Uplink

    rng = np.random.default_rng(seed)
    for _ in range(count):
        yield Uplink(
            max_power_w=float(rng.uniform(0.01, 1.0)),
            bandwidth_hz=float(10 ** rng.uniform(5, 7)),
            path_gain=float(10 ** rng.uniform(-14, -8)),
            noise_psd_w_hz=4e-21,
            bits=float(10 ** rng.uniform(4, 8)),
        )


def _share_sets(seed: int = 0, count: int = 40):
    from mecsim.policies.allocation import Share

    rng = np.random.default_rng(seed)
    for _ in range(count):
        n = int(rng.integers(1, 11))
        snr = 10 ** rng.uniform(-1, 3, n)
        yield (
            [
                Share(
                    int(i),
                    float(10 ** rng.uniform(4, 8)),
                    float(rng.integers(1, 500)),
                    lambda b, s=float(snr[i]): b * math.log2(1 + s),
                )
                for i in range(n)
            ],
            float(10 ** rng.uniform(6, 8)),
        )


def limits_outcome(name: str) -> Outcome:
    """The ``limits`` check of a power control."""
    from mecsim.net.settings import UplinkConfig
    from mecsim.policies.power import POWER_CONTROLS

    settings = UplinkConfig(power=name, **POWER_SETTINGS)
    policy, again = (POWER_CONTROLS.get(name)(settings) for _ in range(2))
    outcome = Outcome("any", "limits")
    for uplink in _uplinks():
        power = policy.power_w(uplink)
        if not (math.isfinite(power) and 0 < power <= uplink.max_power_w * (1 + 1e-12)):
            outcome.problems.append(f"{power!r} W for an uplink of at most {uplink.max_power_w} W")
        elif again.power_w(uplink) != power:
            outcome.problems.append("the same uplink got another power")
    outcome.problems = outcome.problems[:1]
    return outcome


def split_outcome(name: str) -> Outcome:
    """The ``split`` check of a bandwidth allocation."""
    from mecsim.net.settings import UplinkConfig
    from mecsim.policies.allocation import ALLOCATIONS

    cls = ALLOCATIONS.get(name)
    outcome = Outcome("any", "split")
    if not cls.splits:
        outcome.skipped = "no split: each upload waits for its own band"
        return outcome
    policy, again = cls(UplinkConfig(allocation=name)), cls(UplinkConfig(allocation=name))
    for shares, total in _share_sets():
        bands = list(policy.bands(shares, total))
        ok = len(bands) == len(shares) and all(math.isfinite(b) and b >= 0 for b in bands)
        if not ok or sum(bands) > total * (1 + 1e-9):
            outcome.problems.append(f"bands {bands} for {len(shares)} uploads on {total:g} Hz")
        elif list(again.bands(shares, total)) != bands:
            outcome.problems.append("the same uploads got other bands")
    outcome.problems = outcome.problems[:1]
    return outcome


def run_outcomes(settings: list[str]) -> list[Outcome]:
    """``ledger``, ``executors``, ``cost-only`` and ``resume`` on runs with ``settings``
    (a policy whose run fails fails ``ledger`` with the error, and skips the rest)."""
    from mecsim.analysis.invariants import check_result

    ledger = Outcome("any", "ledger")
    rest = [Outcome("any", check) for check in ("executors", "cost-only", "resume")]
    try:
        serial = _run(settings, executor="serial")
    except Exception as error:  # noqa: BLE001 - a plug-in's failure is what is checked
        ledger.problems.append(f"the run failed: {str(error).splitlines()[0][:200]}")
        for outcome in rest:
            outcome.skipped = "the run failed"
        return [ledger, *rest]
    ledger.problems += [f"{c.name}: {p}" for c in check_result(serial) for p in c.problems][:3]
    executors, cost, resumed = rest
    executors.problems += _differ(serial, _run(settings, executor="batched"), "batched")
    cost.problems += _differ(serial, _run([*settings, "execution.cost_only=true"]), "cost-only")
    resumed.problems += resume_problems(settings)
    return [ledger, *rest]


def check_power_control(name: str) -> list[Outcome]:
    """Every check of the module docstring for power control ``name``."""
    keys = [f"network.uplink.{key}={value}" for key, value in POWER_SETTINGS.items()]
    return [limits_outcome(name), *run_outcomes([*RUN, *keys, f"network.uplink.power={name}"])]


def check_allocation(name: str) -> list[Outcome]:
    """Every check of the module docstring for bandwidth allocation ``name``."""
    # without fading: a re-split at every fading block made min_max's runs minutes long
    band = [
        "network.fading=none",
        "clients.bandwidth_mhz=2",
        "network.uplink.total_bandwidth_mhz=6",
    ]
    return [split_outcome(name), *run_outcomes([*RUN, *band, f"network.uplink.allocation={name}"])]


CHECKS: dict[str, Callable[[str], list[Outcome]]] = {
    "power control": check_power_control,
    "allocation": check_allocation,
}
"""The suite of each kind, by what :func:`kind_of` answers."""


def kind_of(name: str) -> str | None:
    """Whether ``name`` is a power control or an allocation (None: neither)."""
    from mecsim.policies.allocation import ALLOCATIONS
    from mecsim.policies.power import POWER_CONTROLS

    if name in POWER_CONTROLS:
        return "power control"
    return "allocation" if name in ALLOCATIONS else None
