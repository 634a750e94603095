"""The type of a simulated activity: a SimPy process generator."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

Process = Generator[simpy.Event, Any, Any]
"""A timed activity or a protocol: yields SimPy events, returns its outcome."""
