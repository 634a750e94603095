"""Settings every protocol shares; each protocol subclasses them with its own keys.

A key of another protocol is an error that names the protocol it belongs to
(see :func:`mecsim.config.scenario.validate_scenario`).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from mecsim.common.section import Section


class ProtocolSettings(Section):
    """Rounds, participation and evaluation cadence (every protocol); which clients a
    round takes is ``[scheduling]``'s."""

    kind: str = Field(
        default="compute_and_wait", description="the protocol (mecsim list protocols)"
    )
    rounds: int = Field(
        default=20, ge=1, le=10_000_000, description="rounds (async: server updates)"
    )
    participation: float = Field(
        default=1.0, gt=0, le=1, description="fraction of clients selected per round, in (0, 1]"
    )
    clients_per_round: int | None = Field(
        default=None, ge=1, description="a count; overrides participation"
    )
    eval_every: int = Field(default=1, ge=1, description="evaluate every this many rounds")

    @field_validator("participation", mode="before")
    @classmethod
    def _a_fraction(cls, value: Any) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool) and 1 < value <= 100:
            raise ValueError(
                f"a fraction in (0, 1], got {value}: for {value:g} % write {value / 100:g}, "
                f"for {value:g} clients a round set clients_per_round = {value:g}"
            )
        return value

    def round_size(self, num_clients: int) -> int:
        """k: ``clients_per_round``, or the ``participation`` fraction of ``num_clients``."""
        return self.clients_per_round or max(1, round(self.participation * num_clients))

    @property
    def local_proximal(self) -> float:
        """rho of a proximal term ``rho/2 ||w - w_received||^2`` the protocol adds to the
        uploading task's loss (FedAsync's regularized local objective); 0 for none."""
        return 0.0
