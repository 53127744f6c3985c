# syntax=docker/dockerfile:1
#
# Lockstep worker image.
#
#   docker build -t lockstep:dev .
#   docker run --rm -e LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS=kafka:9092 lockstep:dev            # a worker
#   docker run --rm lockstep:dev topics list                                              # any command
#
# Two stages: the builder turns the project and every dependency into wheels (it may compile);
# the runtime installs those wheels into a plain slim Python and carries no compiler, no pip cache,
# no source tree. The embedded broker (extra `embedded`) is not installed: a container always joins
# a real Kafka (LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS). See docs/operations.md.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --------------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1

# A compiler for any dependency without a wheel for this platform. This stage is thrown away, so
# the packages are not pinned to Debian point releases (they never reach the runtime image).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
# Dependency metadata first, source after: the wheel layer below is rebuilt only when they change.
COPY pyproject.toml README.md ./
COPY models ./models
COPY streams ./streams
COPY agents ./agents
COPY lockstep ./lockstep
# lockstep bench (installed with the package; its results stay out of the context)
COPY benchmarks ./benchmarks
RUN pip wheel --wheel-dir /wheels .

# --------------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime

LABEL org.opencontainers.image.title="lockstep" \
      org.opencontainers.image.description="Streaming event correlation for AI training clusters" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LOCKSTEP_WEB_HOST=0.0.0.0 \
    LOCKSTEP_WEB_PORT=6066 \
    LOCKSTEP_DATA_DIR=/var/lib/lockstep

# A fixed, unprivileged uid/gid (Kubernetes' runAsUser/fsGroup in deploy/kubernetes use the same).
RUN groupadd --system --gid 10001 lockstep \
 && useradd --system --uid 10001 --gid lockstep --no-create-home --home-dir /var/lib/lockstep \
            --shell /usr/sbin/nologin lockstep \
 && install -d -o lockstep -g lockstep -m 0750 /var/lib/lockstep

# Install from the builder's wheels only (no index): the wheels never become a layer of this image.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels /wheels/lockstep-*.whl \
 && lockstep --version

WORKDIR /var/lib/lockstep
USER 10001:10001
VOLUME ["/var/lib/lockstep"]
EXPOSE 6066

# /healthz of the worker's HTTP server (settings.web_host/web_port). The slim image has no curl:
# the interpreter that runs Lockstep does the request, on ${LOCKSTEP_WEB_PORT:-6066}.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('LOCKSTEP_WEB_PORT', '6066'), timeout=4)"]

ENTRYPOINT ["lockstep"]
CMD ["worker"]
