"""The leaves every layer may use: errors, seeded streams, registries, plug-in loading,
the settings base class, per-client distributions, threads, signals, GC pauses.

Imports nothing of mecsim but itself (floor 0 of ``docs/design.md``).
"""
