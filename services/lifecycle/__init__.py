"""The lifecycle service: the only code that starts, watches and ends processes.

- :mod:`.controller` — :class:`~.controller.LifecycleController`, leases, spawns, channels
  and reaping for one gateway; :mod:`.requests` — what it takes, answers and raises;
- :mod:`.leases` — the durable lease records, the instance id and slots;
- :mod:`.processes` — reading live processes and proving a tree is a lease's;
- :mod:`.reaping` — ending a lease's tree, at close and at start;
- :mod:`.adapters` — spawning adapters, warm pools, the wrappers' control channel;
- :mod:`.attach` — an adapter's pipes and who is attached to them;
- :mod:`.startup` — before serving: re-adopt live wrappers, reap what earlier runs left;
- :mod:`.api` — the gRPC servicer and the server that runs it;
- :mod:`.wrapper` — the standard-library-only wrapper process, installed by file.
"""
