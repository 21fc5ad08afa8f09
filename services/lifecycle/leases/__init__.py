"""What this service owns, durably: leases, the instance that holds them, and who holds them.

- :mod:`.store` — :class:`~.store.LeaseStore`, one durable record per wrapper spawn;
- :mod:`.instance` — the gateway instance id, generated once per install;
- :mod:`.instance_slots` — the slot each lifecycle service on a data dir holds, and its id;
- :mod:`.holds` — the leases an ``Attach`` stream holds until it lets them go.
"""
