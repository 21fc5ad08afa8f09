"""What a client connects to: the stdio and gateway front doors, and ``acpgate bridge``.

Their auth, bounds and plain-HTTP endpoints live here too. May import every edge part
below it (dialect, sessions, adapter, ports, the edge-wide modules).

The gateway's front door on its one port speaks HTTP/1.1, HTTP/2 and WebSocket (the ACP
remote transport):

- :mod:`.server` takes each TCP (or TLS) connection and decides what it speaks:
  HTTP/2 (TLS ALPN ``h2``, h2c prior knowledge, ``Upgrade: h2c``), a WebSocket
  upgrade on ``/acp`` (handed, bytes and all, to ``websockets``: the relay stays
  the one ``services.edge.transport.ws_server`` measured), or HTTP/1.1;
- :mod:`.http1` and :mod:`.http2` turn those into :class:`.exchange.HttpRequest` /
  :class:`.exchange.HttpResponse` pairs, the one shape every HTTP route sees;
- :mod:`.routes` answers ``/healthz``, ``/metrics`` and ``/acp``, which is
  Streamable HTTP (:mod:`.streamable`) under the same auth, limits and principals
  as the WebSocket;
- :mod:`.origin` keeps browsers to ``[gateway] allowed_origins``.

Nothing here understands ACP beyond what the RFD routes by (a request's method, the
``id`` an answer carries, a ``sessionId``): every client connection becomes one
``serve_connection`` of the dialect, whatever it arrived over.
"""
