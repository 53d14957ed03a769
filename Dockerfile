# Tierkeeper image: the `tierkeeper` console script (operator, CLI and job commands).
#   docker build -t tierkeeper:dev .
#   docker run --rm tierkeeper:dev --help
# The Helm chart runs it as `tierkeeper operator --all-namespaces` with a read-only root filesystem.

FROM python:3.11-slim AS build
WORKDIR /src
# Only what the package build needs, so the build cache survives edits to tests and docs.
COPY pyproject.toml README.md ./
COPY storage_core ./storage_core
COPY operator ./operator
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN groupadd --system --gid 10001 tierkeeper \
 && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
    --shell /usr/sbin/nologin tierkeeper
COPY --from=build /install /usr/local
# Numeric, so Kubernetes can verify runAsNonRoot without resolving the name.
USER 10001:10001
WORKDIR /tmp
ENTRYPOINT ["tierkeeper"]
CMD ["--help"]
