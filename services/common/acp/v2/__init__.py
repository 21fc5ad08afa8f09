"""ACP v2 beside v1: names and pure translation between the two (sans-I/O).

Nothing here reads or writes a socket: each module takes messages of one version
and returns those of the other, so the edge can serve a v2 client on any agent (and,
later, a v1 client on a v2 agent) and tests can check a translation alone.

- :mod:`.names`: v2's method names, update kinds, states, error codes (one place);
- :mod:`.handshake`: version negotiation and the ``initialize`` shapes;
- :mod:`.updates`: v1 ``session/update`` payloads → v2 upserts, per session;
- :mod:`.config`: modes as a ``category: "mode"`` config option, config options renamed;
- :mod:`.requests`: what a v2 client sends, read as v1 (MCP entries, prompts), and the
  permission request reshaped.
"""
