"""The clock: the SimPy simulation and its timed activities (``simulation``; transfers,
``compute`` and ``server`` work as mix-ins), the events ledger (``recorder``),
evaluation, new clients, client faults and checkpoints.

May import everything below it (net, executors, algorithms, learning, common); the
protocols that compose these activities into rounds sit above, in ``mecsim.protocols``.
"""
