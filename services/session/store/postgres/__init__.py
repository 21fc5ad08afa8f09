"""The session store on PostgreSQL, shared by several gateway hosts.

- :mod:`.store` — :class:`~.store.PostgresSessionStore`, the backend on an asyncpg pool;
- :mod:`.db` — the target, the pool, the driver's errors, free text;
- :mod:`.schema` — the tables (SQLite's, in PostgreSQL types) and their migrations;
- :mod:`.history`, :mod:`.events`, :mod:`.fork` — turns and history pages, the event log,
  ``session/fork``, each in one transaction;
- :mod:`.liveness` — which hosts are alive, from one advisory lock per host.

Callers open a store through :func:`services.session.store.open_store`, not from here.
"""
