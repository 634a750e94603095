"""Scenario files: the typed sections (``sections``), reading TOML and overrides
(``scenario``), every check with its dotted path (``validation``; ``problems`` turns
pydantic's errors into them), per-client CSV tables (``client_table``), settings
that change nothing (``ineffective``).

May import every layer below the run: protocols (their settings and registry), the
engine's fault settings, the network's settings, the scheduling policies, algorithms,
executors, learning.
"""
