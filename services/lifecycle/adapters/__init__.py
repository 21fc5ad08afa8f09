"""Starting adapters, and taking back the ones a restarted service finds alive.

- :mod:`.spawn` — installing the wrapper and spawning it with an adapter's command;
- :mod:`.launch` — one ``EnsureSession`` spawn, step by step, lease first;
- :mod:`.child_env` — the clean environment an adapter starts with;
- :mod:`.sealed` — opening the launch spec the session service sealed;
- :mod:`.warm`, :mod:`.pool_spec` — warm pools: adapters spawned ahead of their session;
- :mod:`.adopt`, :mod:`.control_channel` — re-adopting live wrappers over their control
  channel after a restart;
- :mod:`.session_logs` — adapter logs found by session id.
"""
