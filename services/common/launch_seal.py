"""The seal on a launch spec: how the lifecycle service knows the session service chose it.

``acpgate.launch.v1.SealedLaunch`` is a serialized ``LaunchSpec`` and an
HMAC-SHA256 of those exact bytes under the install's seal key
(:func:`services.common.service_key.seal_key`). The session service seals what
it resolved from configuration (``services.session.decisions.launch``); the lifecycle
service opens the seal and runs nothing else (``services.lifecycle.adapters.sealed``);
the edge only passes the bytes on. This module is the one definition of the
seal both sides compute.
"""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["seal_of", "sealed_by"]


def seal_of(key: bytes, spec: bytes) -> bytes:
    """The seal of the serialized spec ``spec`` under ``key``."""
    return hmac.new(key, spec, hashlib.sha256).digest()


def sealed_by(key: bytes, spec: bytes, seal: bytes) -> bool:
    """True when ``seal`` is ``spec``'s seal under ``key`` (constant time)."""
    return hmac.compare_digest(seal_of(key, spec), seal)
