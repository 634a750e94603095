"""The radio resource decisions a wireless-FL study varies: which clients a round takes
(``scheduling``), each upload's transmit power (``power``) and how a cell's band is
shared (``allocation``), each as a small
registered policy chosen in the scenario and pluggable with ``--import``.

Policies see only what a real server could know when it decides (:mod:`.history`):
each client's last reported SINR, its device speed and data size, its last training
loss and update norm, its energy spent and when it was last chosen; never the
future of the fading process. A power policy sees what a client knows when it starts
sending: its band, its large-scale gain, the noise, the bits.

May import :mod:`mecsim.common`; the clock and the protocols above call it.
"""
