"""The network above the physics of ``mecsim.channels``: who transmits when, at what
rate, for how long. ``network`` (client links, the server's and cells' radios),
``settings`` (the ``[network]`` section), ``radio`` (transfers on the event clock),
``link_checks`` (outage before the run), ``closed_form`` (bulk rounds' transfers in
numpy), ``geometry`` (positions, association),
``mobility`` (trajectories) and ``handover`` (A3 events).

May import :mod:`mecsim.common`, :mod:`mecsim.learning` (compute devices),
:mod:`mecsim.channels` and :mod:`mecsim.policies` (power control); algorithms,
executors and the clock sit above it.
"""
