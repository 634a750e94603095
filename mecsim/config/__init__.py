"""Scenario files: the typed sections (``sections``), reading TOML and overrides
(``scenario``), every check with its dotted path (``validation``), per-client CSV
tables (``client_table``).

May import every layer below the run: protocols (their settings and registry), the
engine's fault settings, the network's settings, algorithms, executors, learning.
"""
