# acpgate: one image, three roles (session-service, lifecycle-service, edge).
# docker-compose.yml runs one container per role on a shared data volume.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    ACPGATE_CONFIG_DIR=/var/lib/acpgate

WORKDIR /opt/acpgate
COPY pyproject.toml README.md ./
COPY protos ./protos
COPY acpgate ./acpgate
COPY services ./services
RUN pip install . \
    && groupadd --system --gid 10001 acpgate \
    && useradd --system --uid 10001 --gid acpgate --home-dir /var/lib/acpgate \
       --shell /usr/sbin/nologin acpgate \
    && mkdir -p /var/lib/acpgate \
    && chown acpgate:acpgate /var/lib/acpgate

# Config, tokens, the session store, leases and agent workspaces all live here.
VOLUME ["/var/lib/acpgate"]
USER acpgate:acpgate
EXPOSE 42617
ENTRYPOINT ["acpgate"]
CMD ["serve"]
