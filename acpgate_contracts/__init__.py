"""The contracts between acpgate's processes, generated from ``protos/`` (``make proto``).

One subpackage per gRPC contract: ``session.v1`` (the session service), ``lifecycle.v1``
(the lifecycle service) and ``launch.v1`` (the sealed launch spec both of them read). The
proto packages on the wire stay ``acpgate.session.v1``, ``acpgate.lifecycle.v1`` and
``acpgate.launch.v1``. Nothing here is edited by hand; ``make proto-check`` fails when the
committed code differs from the protos. The hand-written wire formats (descriptor passing,
the hand-over, the launch seal) are described in ``protos/README.md``.
"""
