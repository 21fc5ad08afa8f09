"""The host view's ACP extension methods (issue 31), beside ``services.common.protocol``.

What ``acpgate ps`` shows, over ``/acp``, for the web console's host page: answered
only for a token holding the ``host`` grant (``acpgate token create --admin``) or the
local operator (``services.edge.dialect.host``).
"""

from __future__ import annotations

from typing import Final

__all__ = [
           "MSG_HOST_ELSEWHERE",
           "MSG_HOST_REFUSED",
           "M_HOST_CANCEL",
           "M_HOST_CLOSE",
           "M_HOST_PS",
]

#: ACP extension methods a client (the web console's host page) calls on ``/acp``: what
#: ``acpgate ps`` shows, and a live session cancelled or closed. Answered only for a token
#: holding the ``host`` grant (``acpgate token create --admin``) or the local operator.
M_HOST_PS: Final = "_acpgate/host/ps"
M_HOST_CANCEL: Final = "_acpgate/host/cancel"
M_HOST_CLOSE: Final = "_acpgate/host/close"
#: The refusal of a host method to any other caller (the same whatever the params).
MSG_HOST_REFUSED: Final = ("Not authorised: host methods need an admin token "
                           "(`acpgate token create --admin`)")
#: A host close or cancel of a session another acpgate process serves.
MSG_HOST_ELSEWHERE: Final = ("Session {session_id} is served by another acpgate process; "
                             "close or cancel it there")
