# nodus-gitops: the reconciler service, non-root, with the local backend's tools.
#   docker build -t nodus-gitops .
#   docker run -p 8080:8080 -v nodus-state:/var/lib/nodus-gitops \
#     -v "$PWD/config.yaml:/etc/nodus-gitops/config.yaml:ro" nodus-gitops
# Stage 1 builds a wheel; stage 2 installs it with the runtime dependencies only.
FROM python:3.11.10-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY reconciler ./reconciler
COPY providers ./providers
COPY state ./state
COPY schemas ./schemas
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11.10-slim-bookworm
# git for source.git checkouts of the local backend, bubblewrap to isolate its runs.
RUN apt-get update \
    && apt-get install -y --no-install-recommends git=1:2.39.* bubblewrap=0.8.* \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl "psycopg[binary]>=3.1" && rm -rf /wheels \
    && useradd --system --create-home --uid 10001 nodus \
    && mkdir -p /var/lib/nodus-gitops /etc/nodus-gitops \
    && chown nodus /var/lib/nodus-gitops
USER 10001
ENV NODUS_GITOPS_HOME=/var/lib/nodus-gitops \
    NODUS_GITOPS_LISTEN=0.0.0.0:8080 \
    PYTHONUNBUFFERED=1
VOLUME ["/var/lib/nodus-gitops"]
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s \
    CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]
ENTRYPOINT ["nodus-gitops"]
CMD ["serve", "--config", "/etc/nodus-gitops/config.yaml"]
