"""The ``acpgate`` command line and the composition of its processes (an ACP session host).

This package holds the command line (:mod:`acpgate.cli`) and the composition of
processes (:mod:`acpgate.serve` supervises the three services as children,
:mod:`acpgate.embedded` runs the two gRPC services inside ``acpgate acp``). The
services live in the ``services`` package and import nothing from here; the
contracts between them are generated into ``acpgate_contracts`` from
``protos/``. The CLI passes the services what they need (the version, the
embedded-service starter).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("acpgate")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+src"
