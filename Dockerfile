# The lockstep operator image. Build it from the repository root:
#
#   docker build -t lockstep:0.1.0 .
#
# The Helm chart's default image is lockstep:<appVersion> (charts/lockstep/values.yaml), so on kind load it
# with `kind load docker-image lockstep:0.1.0`; elsewhere push it to a registry and install the chart with
# --set image.repository=<registry>/lockstep.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/lockstep
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY operator ./operator
# The operator's dependencies only (not the emulator's [sim] extra), at the versions `make` pinned.
RUN /opt/lockstep/bin/pip install -c constraints.txt .

FROM python:3.11-slim
LABEL org.opencontainers.image.title="lockstep" \
      org.opencontainers.image.description="Gang scheduler for Kubernetes with DRA ResourceClaims" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed UID/GID so the chart's securityContext (runAsUser: 65532) names this user.
RUN groupadd --system --gid 65532 lockstep \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin lockstep
COPY --from=build /opt/lockstep /opt/lockstep
ENV PATH=/opt/lockstep/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
# 8080: /healthz, 9090: /metrics (health_bind_address and metrics_bind_address).
EXPOSE 8080 9090
ENTRYPOINT ["lockstep", "run"]
