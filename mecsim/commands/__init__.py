"""What a user calls: the command line (``cli``, ``parser``), the Python API (``api``),
sweeps (``sweeps``, ``ray_sweeps``), ``compare``/``report`` (``comparison``),
conformance (``conformance``) and ``describe``.

The top floor: may import anything; nothing imports it (but ``mecsim.__main__`` and
the root's lazy API names).
"""
