# nodus-gitops: the reconciler service, non-root, with the local backend's tools.
#   docker build -t nodus-gitops --build-arg VERSION=0.1.0 \
#     --build-arg SOURCE_URL="$(git remote get-url origin)" .
#   docker run -p 8080:8080 -v nodus-state:/var/lib/nodus-gitops \
#     -v "$PWD/config.yaml:/etc/nodus-gitops/config.yaml:ro" nodus-gitops
# Stage 1 builds a wheel with the locked build tools (requirements-build.lock); stage 2
# installs the locked runtime dependencies (requirements.lock, hashes required) and then
# the wheel alone. Refresh the locks as the README's Install section says.
FROM python:3.11.10-slim-bookworm AS build
WORKDIR /src
COPY requirements-build.lock ./
RUN pip install --no-cache-dir --require-hashes -r requirements-build.lock
COPY pyproject.toml README.md MANIFEST.in ./
COPY build_support ./build_support
COPY reconciler ./reconciler
COPY providers ./providers
COPY state ./state
COPY schemas ./schemas
RUN pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /wheels .

FROM python:3.11.10-slim-bookworm
ARG VERSION=0.1.0
ARG SOURCE_URL=""
LABEL org.opencontainers.image.title="nodus-gitops" \
      org.opencontainers.image.description="GitOps reconciler for Nodus GPU workloads (Job, Pipeline, Sweep)" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
# git for source.git checkouts of the local backend, bubblewrap to isolate its runs,
# slirp4netns for their own network (outbound only, never the host's loopback).
RUN apt-get update \
    && apt-get install -y --no-install-recommends git=1:2.39.* bubblewrap=0.8.* slirp4netns=1.2.* \
    && rm -rf /var/lib/apt/lists/*
COPY requirements.lock /tmp/requirements.lock
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --require-hashes -r /tmp/requirements.lock \
    && pip install --no-cache-dir --no-deps /wheels/*.whl \
    && pip check \
    && rm -rf /wheels /tmp/requirements.lock \
    && useradd --system --create-home --uid 10001 nodus \
    && mkdir -p /var/lib/nodus-gitops /etc/nodus-gitops \
    && chown nodus /var/lib/nodus-gitops
USER 10001
# NODUS_GITOPS_LISTEN is the listen setting here: it overrides the config file's `listen`
# (a `--listen` flag overrides both). The health check needs neither: `serve` records the
# address it bound in the state directory, and the check probes that, bypassing any proxy.
# To serve elsewhere: docker run -e NODUS_GITOPS_LISTEN=0.0.0.0:9000 -p 9000:9000 ...
ENV NODUS_GITOPS_HOME=/var/lib/nodus-gitops \
    NODUS_GITOPS_LISTEN=0.0.0.0:8080 \
    PYTHONUNBUFFERED=1
VOLUME ["/var/lib/nodus-gitops"]
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s \
    CMD ["python", "-m", "nodus_gitops.web.healthcheck"]
ENTRYPOINT ["nodus-gitops"]
CMD ["serve", "--config", "/etc/nodus-gitops/config.yaml"]
