# acpgate: one image, every role (serve, session-service, lifecycle-service, edge).
#
#   docker build -t acpgate .                          # lean: the built-in agent only
#   docker build --target agents -t acpgate:agents .   # + Node and the external ACP agents
#
# docker-compose.yml runs one container per role from one build; with
# docker-compose.agents.yml the containers run the `agents` image (Claude Code,
# Codex). A plain `docker run -p 42617:42617 acpgate` serves the gateway on every
# interface: beyond a private network, require TLS ([gateway.tls]) and keep
# [gateway] require_auth on (the default).

# ---------------------------------------------------------------- base: acpgate itself
FROM python:3.11-slim AS base

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    ACPGATE_CONFIG_DIR=/var/lib/acpgate \
    # Reachable from outside the container (the gateway's own default is 127.0.0.1).
    ACPGATE_gateway__host=0.0.0.0

WORKDIR /opt/acpgate
COPY pyproject.toml README.md ./
COPY protos ./protos
COPY acpgate ./acpgate
COPY acpgate_contracts ./acpgate_contracts
COPY services ./services
# Runtime dependencies only: the code generator (grpcio-tools) is a dev dependency.
RUN pip install . \
    && groupadd --system --gid 10001 acpgate \
    && useradd --system --uid 10001 --gid acpgate --home-dir /var/lib/acpgate \
       --shell /usr/sbin/nologin acpgate \
    && mkdir -p /var/lib/acpgate /workspace \
    && chown acpgate:acpgate /var/lib/acpgate /workspace \
    && chmod 0700 /var/lib/acpgate

# Config, tokens, the session store, leases and agent workspaces: acpgate's own state.
VOLUME ["/var/lib/acpgate"]
# The projects sessions work in (a client's `cwd`): mount them here, never under the state.
VOLUME ["/workspace"]
EXPOSE 42617
# The gateway's /healthz (both services' gRPC health) on its configured port.
HEALTHCHECK --interval=10s --timeout=5s --start-period=15s --retries=6 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('ACPGATE_gateway__port', '42617'), timeout=3)"]
ENTRYPOINT ["acpgate"]
CMD ["serve"]

# ---------------------------------------------------------------- agents: + Node, the adapters
FROM node:22-bookworm-slim AS node

FROM base AS agents
USER root
COPY --from=node /usr/local/bin/node /usr/local/bin/node
COPY --from=node /usr/local/lib/node_modules /usr/local/lib/node_modules
# The adapters at the versions the real-adapter tier (tests/realagents) verifies.
COPY tests/realagents/packages.txt /tmp/packages.txt
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
    && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \
    && npm install -g --no-audit --no-fund $(grep -v '^\s*#' /tmp/packages.txt | grep -v '^\s*$') \
    && npm cache clean --force \
    && rm /tmp/packages.txt
USER acpgate:acpgate

# ---------------------------------------------------------------- lean: the default image
FROM base AS lean
USER acpgate:acpgate
