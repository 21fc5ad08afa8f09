"""acpgate: an ACP session host.

This package holds the command line (:mod:`acpgate.cli`) and the gRPC code
generated from ``protos/`` (``acpgate.session.v1``, ``acpgate.lifecycle.v1``).
The services themselves live in the ``services`` package.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("acpgate")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+src"
