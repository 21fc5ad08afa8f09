"""The environment an adapter starts with: a clean base, never ours.

The lifecycle service's own environment holds what no agent may learn: the
service addresses and credential variables, the store's password variable, the
built-in agent's provider key (which an external agent has no business with),
whatever the operator's shell exported. An adapter gets only:

1. :data:`BASE_ENV` from this service's environment — what any program needs to
   run as the user (PATH, HOME, locale, TMPDIR, terminal, XDG dirs) and to reach
   the network the way the host does (proxies, extra CA certificates);
2. the variables its launch spec passes on (``[agents.<alias>] pass_env``, and for
   the built-in agent its ``api_key_env`` and acpgate's own configuration
   overrides), names or ``*`` globs, matched case-sensitively;
3. its configured ``env``, over both;

and the wrapper adds the lease markers last. Pure: the caller hands in the
environment to draw from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from services.common.env_names import passes

__all__ = ["BASE_ENV", "child_environment"]

#: What every adapter gets from the lifecycle service's environment (names or globs).
BASE_ENV: tuple[str, ...] = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL",
    "LANG", "LANGUAGE", "LC_*", "TZ", "TMPDIR",
    "TERM", "COLORTERM", "NO_COLOR",
    "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR",
    # The network as the host reaches it: proxies and extra trusted CAs.
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY",
    "http_proxy", "https_proxy", "no_proxy", "all_proxy",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE",
)


def child_environment(ours: Mapping[str, str], pass_env: Iterable[str],
                      env: Mapping[str, str]) -> dict[str, str]:
    """The clean base and ``pass_env`` drawn from ``ours``, with ``env`` over them."""
    patterns = (*BASE_ENV, *pass_env)
    out = {name: value for name, value in ours.items() if passes(name, patterns)}
    out.update(env)
    return out
