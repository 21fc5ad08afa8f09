"""Streamable HTTP (ACP RFD): POST in, SSE out, one connection-scoped and one stream per session.

:mod:`.routing` decides where each message goes (sans I/O), :mod:`.streams` numbers
and bounds what waits and what is kept for a resuming reader, :mod:`.sse` writes a
stream to one reader, :mod:`.connection` is one ``Acp-Connection-Id`` (the dialect's
transport), :mod:`.endpoint` answers ``POST``/``GET``/``DELETE /acp``.
"""
