"""Starting adapters: one spawn step by step, warm pools, the wrapper's control channel.

- :mod:`.spawn` — installing the wrapper and spawning it with an adapter's command;
- :mod:`.launch` — one ``EnsureSession`` spawn, step by step, lease first;
- :mod:`.child_env` — the clean environment an adapter starts with;
- :mod:`.sealed` — opening the launch spec the session service sealed;
- :mod:`.warm`, :mod:`.pool_spec` — warm pools: adapters spawned ahead of their session;
- :mod:`.control_channel` — the service's end of each wrapper's control channel (what a
  restarted service re-adopts it over);
- :mod:`.session_logs` — adapter logs found by session id.
"""
