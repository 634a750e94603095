"""The base class of every scenario section and settings class.

It lives apart from :mod:`mecsim.scenario` so that algorithms and protocols
can declare their settings without importing the scenario (which imports
their registries): dependencies point one way, scenario -> registries.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """Base of every scenario section: unknown keys are errors, defaults are validated."""

    model_config = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)
