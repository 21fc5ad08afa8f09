"""The session service's tests: its store on SQLite and PostgreSQL, decisions and every RPC."""
