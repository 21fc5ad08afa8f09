"""What the session service decides, from the config, the file system and the stored rows.

- :mod:`.aliases` — which agent an alias means, the restore chain, launch specs;
  :mod:`.launch` — sealing the launch spec an alias resolves to;
- :mod:`.workspace` — a session's workspace directory;
  :mod:`.confinement` — the directories that may never be one;
- :mod:`.policy` — a session's security policy (what its agent may do);
- :mod:`.visibility` — who may list, read, send to or watch a session;
- :mod:`.lineage` — a spawned child session's owner, autonomy and workspace.

The RPCs in :mod:`services.session.api` call these and turn their refusals into
status codes; nothing here serves or raises a gRPC status.
"""
