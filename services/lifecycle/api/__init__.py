"""The lifecycle service's gRPC face, and serving it.

- :mod:`.server` — starting the service (in process, or ``acpgate lifecycle-service``);
- :mod:`.servicer` — every RPC of ``acpgate.lifecycle.v1``, over the controller;
- :mod:`.convert` — the service's records as proto messages;
- :mod:`.attach_stream` — an ``Attach`` stream whose caller takes the adapter's pipes;
- :mod:`.keep_on_loss` — leases kept open for a new attacher after a stream was lost.
"""
