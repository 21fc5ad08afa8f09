"""An adapter's pipes while it runs, and who is attached to them.

- :mod:`.channel` — :class:`~.channel.AdapterChannel`, the service's side of one wrapper:
  its ACP pipes, its reports, its attacher;
- :mod:`.stdout_pipe`, :mod:`.stdout_batches` — the adapter's stdout in a bounded buffer,
  cut into line blocks an attacher takes in batches;
- :mod:`.stderr_tail` — the last lines of its stderr, for the error a client sees;
- :mod:`.fd_grants`, :mod:`.fd_server` — handing the pipes themselves to an attached edge
  over the fd socket.
"""
