"""The session store on one SQLite file: the backend, its schema, and the file's repair.

- :mod:`.store` — :class:`~.store.SqliteSessionStore`, the backend on one aiosqlite connection;
- :mod:`.db` — the file check, the connection, the transaction;
- :mod:`.schema` — the tables and their forward migrations;
- :mod:`.history`, :mod:`.events`, :mod:`.fork` — turns and history pages, the event log,
  ``session/fork``, each in its transaction;
- :mod:`.diagnosis`, :mod:`.salvage` — the file's state seen read-only, and
  ``acpgate store repair``.

Callers open a store through :func:`services.session.store.open_store`, not from here.
"""
