#!/bin/sh
# Install Tierkeeper into a fresh virtual environment, pinned by constraints.txt.
#
#   docker/install-venv.sh TARGET VENV WHEEL CONSTRAINTS
#
# TARGET is `pipeline` (every dependency: the Jobs run Spark) or `operator` (everything except the
# Spark-only distributions, so the operator image carries no PySpark and needs no JVM). The Dockerfile
# runs this in its build stages and tests/packaging runs it on the host, so the image and the test
# install the same way; only where pip finds the files differs (the image build sets PIP_NO_INDEX and
# PIP_FIND_LINKS to a directory of prebuilt wheels and PIP_NO_CACHE_DIR, the test uses the index through
# pip's cache).
set -eu

if [ "$#" -ne 4 ]; then
    echo "usage: $0 pipeline|operator VENV WHEEL CONSTRAINTS" >&2
    exit 2
fi
target=$1
venv=$2
wheel=$3
constraints=$4
# Distributions only the Spark jobs need; the operator target leaves them out.
spark_only='^(pyspark|py4j)=='

# No pip inside the environment: the final image copies the venv and has no use for an installer.
# Bytecode is compiled here (pip's default), because the images run with a read-only root filesystem.
"${PYTHON:-python3}" -m venv --without-pip "$venv"
pip_install() {
    "${PYTHON:-python3}" -m pip --python "$venv/bin/python" install --disable-pip-version-check --quiet "$@"
}

case "$target" in
pipeline)
    pip_install --constraint "$constraints" "$wheel"
    ;;
operator)
    # Every pinned runtime dependency except the Spark-only ones, then the project itself without
    # dependency resolution (it would pull PySpark back in).
    requirements="$venv/.operator-requirements.txt"
    grep -E '^[A-Za-z0-9]' "$constraints" | grep -v -i -E "$spark_only" >"$requirements"
    pip_install --constraint "$constraints" --requirement "$requirements"
    pip_install --no-deps "$wheel"
    rm -f "$requirements"
    ;;
*)
    echo "$0: unknown target '$target' (want pipeline or operator)" >&2
    exit 2
    ;;
esac
