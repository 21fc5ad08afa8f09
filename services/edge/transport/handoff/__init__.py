"""Handing an accepted connection to the edge worker it belongs to.

With ``[gateway] workers`` above one, the kernel gives each TCP connection to
any worker. :mod:`.owner` tells from a request's head which worker a request
belongs to (its ``Acp-Connection-Id``, the affinity cookie, ``?worker=``);
:mod:`.wire` is the exchange between siblings over a unix socket; :mod:`.sender`
passes the socket and the bytes read so far to the owner; :mod:`.receiver` is the
owner's side, which resumes the connection as if it had accepted it.
"""
