"""The session service's gRPC face, and serving it.

- :mod:`.server` — starting the service (in process, or ``acpgate session-service``);
- :mod:`.servicer` — every RPC of ``acpgate.session.v1.SessionService``, joined from
  the groups in :mod:`.rpcs`;
- :mod:`.convert` — store records ↔ ``session_pb2`` messages;
- :mod:`.history_pages` — history items cut into the pages a history stream sends;
- :mod:`.turn_from_log` — a spilled turn's history items, read back from its event log.

The decisions it answers with are made in :mod:`services.session.decisions`; what it
stores goes through :mod:`services.session.store`.
"""
