# Tierkeeper images, two targets from one build (any builder of multi-stage Dockerfiles: Docker with or
# without BuildKit, buildah; no `# syntax=` line, so no frontend image is pulled unpinned;
# docs/install.md has the details; `make images` builds both, with buildah where no Docker engine runs):
#   docker build --target operator -t tierkeeper/operator:dev .   # the kopf operator: no PySpark, no JVM
#   docker build --target pipeline -t tierkeeper/pipeline:dev .   # every `tierkeeper` subcommand + Java for Spark
# Both run as the numeric user 10001 with the `tierkeeper` console script as entrypoint. Every Python
# dependency is installed at the exact version pinned in constraints.txt (`make constraints` regenerates it).
#
# Base images are pinned by tag and digest (the multi-arch index digests published in
# docker-library/repo-info for these tags). Bumping one: change tag and digest together.
ARG PYTHON_IMAGE=python:3.11.16-slim-bookworm@sha256:0bee7276f83efd4a1ee05bbbf4281d95ed28e079220a9457f25a93e3f1e3c31b
ARG JRE_IMAGE=eclipse-temurin:17.0.20_8-jre-jammy@sha256:ec72ba5962b45ae4e7f96bfb5ebf6eeb34a488b967f937c8e14f0aaec688954f

# ---- build stages: everything that compiles or downloads happens here (deps-venv is also the final
# stages' base: what its one RUN leaves is the venv) ----
# The dependencies and the project are installed in separate stages, so the layers of the dependencies
# (minutes) are keyed by constraints.txt alone and a source edit redoes only the project's wheel and its
# install (seconds). Each pip run may use a pip cache the builder bind-mounts at PIP_CACHE: make images
# mounts the host's, which the test venv filled (PySpark's wheel, built from its 455 MB sdist, is then
# neither downloaded nor built again). Empty: no cache. Nothing of a cache is left in a layer (buildah
# leaves the empty directory it mounted the cache on).

FROM ${PYTHON_IMAGE} AS project-wheel
ARG PIP_CACHE=
WORKDIR /src
# Only what the package build needs, so this layer's cache survives edits to tests and docs.
COPY pyproject.toml README.md ./
COPY storage_core ./storage_core
COPY operator ./operator
RUN if [ -n "$PIP_CACHE" ]; then export PIP_CACHE_DIR="$PIP_CACHE"; else export PIP_NO_CACHE_DIR=1; fi \
 && pip wheel --disable-pip-version-check --no-deps --wheel-dir /dist .

FROM ${PYTHON_IMAGE} AS deps-venv
ARG PIP_CACHE=
COPY constraints.txt docker/install-venv.sh /build/
# Both targets' dependencies but PySpark's: the operator's whole venv but the project. (PySpark is an
# sdist on PyPI: pip builds it in the spark stage, so no final stage needs a build backend.)
RUN if [ -n "$PIP_CACHE" ]; then export PIP_CACHE_DIR="$PIP_CACHE"; else export PIP_NO_CACHE_DIR=1; fi \
 && /build/install-venv.sh deps /opt/tierkeeper - /build/constraints.txt

FROM deps-venv AS spark-venv
ARG PIP_CACHE=
# PySpark and Py4J over the deps venv, written under /stage: the pipeline copies only these files.
RUN if [ -n "$PIP_CACHE" ]; then export PIP_CACHE_DIR="$PIP_CACHE"; else export PIP_NO_CACHE_DIR=1; fi \
 && /build/install-venv.sh spark /opt/tierkeeper - /build/constraints.txt /stage

FROM deps-venv AS project-venv
# The project without dependencies, under /stage: the only layer a source edit changes. Copied into
# this stage, not bind-mounted with RUN --mount=type=bind,from=project-wheel: buildah 1.28 (Debian
# bookworm's, what builds the images where no Docker engine runs) cannot mount a stage it took from its
# layer cache. Only the /stage trees leave the build stages, so no wheel reaches a final image.
COPY --from=project-wheel /dist /dist
RUN /build/install-venv.sh project /opt/tierkeeper /dist/tierkeeper-*.whl /build/constraints.txt /stage

FROM ${JRE_IMAGE} AS jre

# ---- final stages: the interpreter, one venv (dependencies, then the project over them), and
# (pipeline) a JRE; no compilers, no pip cache ----

# On the deps venv's stage rather than a COPY of it: the same files, but a rebuild does not hash 500 MB to
# find its COPY cached (20 s a target), nor a cold build write them twice. What that stage leaves besides
# /opt/tierkeeper is /build (constraints.txt and install-venv.sh): no wheel, no pip cache.
FROM deps-venv AS runtime
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.source="https://github.com/tierkeeper/tierkeeper" \
      org.opencontainers.image.url="https://github.com/tierkeeper/tierkeeper" \
      org.opencontainers.image.documentation="https://github.com/tierkeeper/tierkeeper/blob/main/docs/install.md" \
      org.opencontainers.image.vendor="Tierkeeper" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11.16-slim-bookworm"
# HOME=/tmp: the pods run with a read-only root filesystem and an emptyDir at /tmp, the one place where
# tools that want a home (Spark, caches) can write.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    PATH=/opt/tierkeeper/bin:$PATH
RUN groupadd --system --gid 10001 tierkeeper \
 && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
    --shell /usr/sbin/nologin tierkeeper
WORKDIR /tmp
ENTRYPOINT ["tierkeeper"]
CMD ["--help"]

FROM runtime AS operator
LABEL org.opencontainers.image.title="tierkeeper-operator" \
      org.opencontainers.image.description="Tierkeeper's Kubernetes operator (TieredTopic, TieredBroker); no PySpark, no JVM."
COPY --from=project-venv /stage/ /
# Numeric, so Kubernetes can verify runAsNonRoot without resolving the name.
USER 10001:10001
# The Helm chart runs `tierkeeper operator ...` with a read-only root filesystem.
CMD ["operator", "--help"]

FROM runtime AS pipeline
LABEL org.opencontainers.image.title="tierkeeper-pipeline" \
      org.opencontainers.image.description="Every tierkeeper subcommand (copy, cleanup, rebuild, ...) with a Java runtime for Spark; run by the operator's Jobs."
ENV JAVA_HOME=/opt/java/openjdk \
    PATH=/opt/tierkeeper/bin:/opt/java/openjdk/bin:/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin
# Temurin's JRE is self-contained (glibc only; jammy's glibc is older than bookworm's, so it runs here).
COPY --from=jre /opt/java/openjdk /opt/java/openjdk
COPY --from=spark-venv /stage/ /
COPY --from=project-venv /stage/ /
USER 10001:10001
CMD ["--help"]
