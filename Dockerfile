# syntax=docker/dockerfile:1
# quotaguard: one image for the webhook, the controller and `quotaguard certs`.
#
#   docker build -t quotaguard:0.1.0 .
#
# The base is an exact Python release. To pin it by digest as well, look the digest up
# (docker buildx imagetools inspect python:3.11.14-slim-bookworm) and pass
#   --build-arg PYTHON_IMAGE=python:3.11.14-slim-bookworm@sha256:<digest>
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/quotaguard
WORKDIR /src
COPY pyproject.toml constraints.txt LICENSE README* ./
COPY quotaguard ./quotaguard
# The package and its runtime dependencies only (no test extras), at the versions the tests
# passed with (constraints.txt), then bytecode ahead of time: the root filesystem is read-only
# in the cluster.
RUN /opt/quotaguard/bin/pip install --no-compile -c constraints.txt . \
 && /opt/quotaguard/bin/python -m compileall -q /opt/quotaguard

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="quotaguard" \
      org.opencontainers.image.description="GPU queue-and-quota policy for Kubernetes (Kueue and Volcano)" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/quotaguard /opt/quotaguard
ENV PATH=/opt/quotaguard/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The same non-root user the manifests run as (runAsUser: 65532).
USER 65532:65532
# 8443: admission webhook (HTTPS); 8080: reports, metrics and probes (HTTP).
EXPOSE 8443 8080
ENTRYPOINT ["quotaguard"]
