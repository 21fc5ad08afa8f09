"""What each dialect method does (SPEC §2–§8), one module per SPEC area.

Every handler takes the :class:`~services.edge.dialect.dispatch.DialectConnection` the
request arrived on and the request's params, validates in the order the SPEC
gives, and returns the result or raises a :class:`JsonRpcError`; the
connection answers. Which method each handler serves, and what a method no
handler serves gets (the relay, :mod:`services.edge.dialect.handlers.relay`), is
declared in the method table, :mod:`services.edge.dialect.method_table`.
"""
