"""Operators' commands: ``acpgate ps``, ``acpgate sessions``, ``acpgate doctor``.

They look at an install through its services' gRPC APIs, with the install's
service credential (:mod:`.client`), never by opening its databases; what runs
is found through :mod:`.endpoints` (the running ``acpgate acp`` and ``serve``
processes of the data dir) or ``[services]``.
"""
