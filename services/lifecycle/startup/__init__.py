"""What a (re)started lifecycle service does before it serves, in this order.

- :mod:`.adopt` — re-adopt the live wrappers an earlier run of this slot left;
- :mod:`.reap` — reap this slot's leftovers and the leases of dead slots;
- :mod:`.legacy_records` — on slot 0, import and reap the records from before leases.

Each step acts on the :class:`~services.lifecycle.controller.LifecycleController` it is
given; :mod:`services.lifecycle.api.server` runs them.
"""
