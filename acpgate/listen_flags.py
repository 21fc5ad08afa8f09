"""``--host`` / ``--port`` of ``acpgate serve`` and ``acpgate edge``, and the URLs a gateway
serves once bound.

The flags override ``[gateway] host`` / ``port`` for one run. They become the
environment overrides ``ACPGATE_gateway__host`` / ``ACPGATE_gateway__port`` of the
process itself, so the config it loads (and loads again) and the children serve
starts, which inherit the environment, all see the same listen address.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
from collections.abc import MutableMapping

from services.common.config import Config

__all__ = ["ENV_GATEWAY_HOST", "ENV_GATEWAY_PORT", "add_listen_flags", "apply_listen_flags",
           "parse_host", "parse_port", "served_urls"]

ENV_GATEWAY_HOST = "ACPGATE_gateway__host"
ENV_GATEWAY_PORT = "ACPGATE_gateway__port"
_MAX_PORT = 65535
#: A DNS name: dot-separated labels of letters, digits and inner hyphens (RFC 1123).
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")
#: Hosts that mean "every address": a client on this host dials loopback instead.
_WILDCARDS = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}


def parse_port(text: str) -> int:
    """A ``--port`` value: a whole number 0-65535 (0: any free port)."""
    try:
        port = int(text.strip(), 10)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a port number (expected 0-65535)") from None
    if not 0 <= port <= _MAX_PORT:
        raise argparse.ArgumentTypeError(
            f"{port} is out of range (expected 0-65535; 0 picks a free port)")
    return port


def parse_host(text: str) -> str:
    """A ``--host`` value: an IPv4 or IPv6 address (brackets allowed) or a host name."""
    host = text.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    if len(host) <= 253 and _HOST_NAME.fullmatch(host):
        return host
    raise argparse.ArgumentTypeError(f"{text!r} is not an IP address or host name")


def add_listen_flags(parser: argparse.ArgumentParser) -> None:
    """``--host`` and ``--port``, overriding ``[gateway]`` for this run."""
    parser.add_argument("--host", type=parse_host, default=None, metavar="ADDRESS",
                        help="listen on this address or host name (overrides [gateway] host)")
    parser.add_argument("--port", type=parse_port, default=None, metavar="N",
                        help="listen on this port, 0-65535, 0 = any free one "
                             "(overrides [gateway] port)")


def apply_listen_flags(args: argparse.Namespace,
                       environ: MutableMapping[str, str] | None = None) -> None:
    """Put the given ``--host`` / ``--port`` into the environment (see the module doc)."""
    env = os.environ if environ is None else environ
    if getattr(args, "host", None) is not None:
        env[ENV_GATEWAY_HOST] = args.host
    if getattr(args, "port", None) is not None:
        env[ENV_GATEWAY_PORT] = str(args.port)


def served_urls(cfg: Config, port: int) -> dict[str, str]:
    """What the gateway on ``port`` serves, as a client on this host dials it: the ACP
    endpoint over WebSocket and Streamable HTTP, the web console, health and metrics
    (all under ``[gateway] path_prefix``)."""
    gw = cfg.gateway
    host = _WILDCARDS.get(gw.host, gw.host)
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    secure = "s" if gw.tls.enabled else ""
    base = f"{host}:{port}{gw.path_prefix}"
    return {"acp": f"ws{secure}://{base}/acp", "acp_http": f"http{secure}://{base}/acp",
            "console": f"http{secure}://{base}/", "healthz": f"http{secure}://{base}/healthz",
            "metrics": f"http{secure}://{base}/metrics"}
