# syntax=docker/dockerfile:1
# One image for all Fairlane services; the command picks the service:
#   fairlane-scheduler | fairlane-scorer | fairlane-agent
#   python -m fairlane_runtime.kafka --bootstrap HOST:PORT   (create the topics)
#
#   docker build -t fairlane:dev .

ARG PYTHON_IMAGE=python:3.11-slim

# ---------------------------------------------------------------- build
FROM ${PYTHON_IMAGE} AS build

RUN pip install --no-cache-dir uv==0.13.8

# The venv is built where it will run (/app/.venv), against the base image's
# interpreter, so it can be copied as is into the runtime stage.
ENV UV_PROJECT_ENVIRONMENT=/app/.venv \
    UV_PYTHON=/usr/local/bin/python3.11 \
    UV_PYTHON_DOWNLOADS=never \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy
WORKDIR /src

# 1) Third-party dependencies only (cached until uv.lock or a pyproject changes).
COPY pyproject.toml uv.lock ./
COPY libs/events/pyproject.toml libs/events/
COPY libs/runtime/pyproject.toml libs/runtime/
COPY libs/scoring/pyproject.toml libs/scoring/
COPY libs/sim/pyproject.toml libs/sim/
COPY services/agent/pyproject.toml services/agent/
COPY services/scheduler/pyproject.toml services/scheduler/
COPY services/scorer/pyproject.toml services/scorer/
COPY clients/python/pyproject.toml clients/python/
COPY eval/pyproject.toml eval/
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-install-workspace

# 2) The workspace packages, installed as wheels (not editable): the runtime stage
#    gets /app/.venv only, never the sources. Every workspace member, since the root
#    project depends on them all (uv refuses a lock whose members are missing); the
#    image so also has `fairlane run` and `fairlane-eval`.
COPY libs libs
COPY services services
COPY clients clients
COPY eval eval
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-editable

# ---------------------------------------------------------------- runtime
FROM ${PYTHON_IMAGE} AS runtime

# Numeric uid/gid so that Kubernetes' runAsNonRoot can verify it.
RUN groupadd --system --gid 10001 fairlane \
 && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
        --shell /usr/sbin/nologin fairlane \
 && mkdir -p /var/lib/fairlane/scorer \
 && chown -R 10001:10001 /var/lib/fairlane

COPY --from=build /app/.venv /app/.venv

# Container defaults: listen on all interfaces (the services default to 127.0.0.1,
# which is unreachable from outside a container) and keep the scorer's Faust state
# in a writable directory (mount a volume / emptyDir there).
ENV PATH=/app/.venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    FAIRLANE_HOST=0.0.0.0 \
    FAIRLANE_WEB_BIND=0.0.0.0 \
    FAIRLANE_METRICS_BIND=0.0.0.0 \
    FAIRLANE_DATA_DIR=/var/lib/fairlane/scorer

WORKDIR /app
USER 10001:10001

# scheduler 8080, scorer 6067 (/metrics, /healthz), agent 9400 (/metrics)
EXPOSE 8080 6067 9400
CMD ["fairlane-scheduler"]
