#!/bin/sh
# Install Tierkeeper into a virtual environment, pinned by constraints.txt.
#
#   docker/install-venv.sh STEP VENV WHEEL|- CONSTRAINTS [ROOT]
#
# The pipeline image is made of all three steps below, in this order (the Jobs run Spark); the operator
# image of `deps` and `project` (no PySpark, so it needs no JVM). The Dockerfile runs them in stages of
# their own, so the layers of the dependencies are keyed by constraints.txt alone and a source change
# reinstalls only the project:
#   deps     a new VENV with every pinned dependency except the Spark-only ones (WHEEL is `-`)
#   spark    the Spark-only pinned distributions, into an existing deps VENV (WHEEL is `-`)
#   project  the project's WHEEL, without dependencies, into an existing VENV
# With ROOT, `spark` and `project` install under ROOT (pip's --root: ROOT/VENV/...), so a build stage
# can copy exactly the files of that step over the deps layer.
# The image build sets PIP_NO_INDEX and PIP_FIND_LINKS to a directory of prebuilt wheels and
# PIP_NO_CACHE_DIR. tests/packaging checks the built images' environments against the pins.
set -eu

if [ "$#" -lt 4 ] || [ "$#" -gt 5 ]; then
    echo "usage: $0 deps|spark|project VENV WHEEL|- CONSTRAINTS [ROOT]" >&2
    exit 2
fi
target=$1
venv=$2
wheel=$3
constraints=$4
root=${5:-}
# Distributions only the Spark jobs need; the operator image leaves them out.
spark_only='^(pyspark|py4j)=='

pip_install() {
    "${PYTHON:-python3}" -m pip --python "$venv/bin/python" install --disable-pip-version-check --quiet \
        --no-warn-script-location ${root:+--root "$root"} "$@"
}

# Bytecode is compiled by pip at install (its default), because the images run with a read-only root
# filesystem and PYTHONDONTWRITEBYTECODE: otherwise every start would compile every import.
deps() {
    # No pip inside the environment: the final image copies the venv and has no use for an installer.
    "${PYTHON:-python3}" -m venv --without-pip "$venv"
    requirements=$(mktemp)
    grep -E '^[A-Za-z0-9]' "$constraints" | grep -v -i -E "$spark_only" >"$requirements"
    pip_install --constraint "$constraints" --requirement "$requirements"
    rm -f "$requirements"
}
spark() {
    requirements=$(mktemp)
    grep -i -E "$spark_only" "$constraints" >"$requirements"
    pip_install --constraint "$constraints" --requirement "$requirements"
    rm -f "$requirements"
}
# Without dependency resolution: they are all there (the operator's would pull PySpark back in).
project() { pip_install --no-deps "$wheel"; }

if [ -n "$root" ] && [ "$target" != spark ] && [ "$target" != project ]; then
    echo "$0: ROOT is for the spark and project steps" >&2
    exit 2
fi
case "$target" in
deps | spark | project) "$target" ;;
*)
    echo "$0: unknown step '$target' (want deps, spark or project)" >&2
    exit 2
    ;;
esac
