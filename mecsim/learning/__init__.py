"""What a client's learning is made of: payloads (``state``), the shared SGD loop
(``training``), the FLOP meter (``cost``), compute devices (``devices``), ``models/``
and ``data/``.

May import :mod:`mecsim.common` only; ``mecsim.channels`` sits on the same floor.
"""
