#!/bin/sh
# The hooks below are single-quoted on purpose: mmdebstrap runs them with $1 set to the new root.
# shellcheck disable=SC2016
# Base images made locally for machines that cannot pull the Dockerfile's pinned bases (no Docker Hub):
# Debian bookworm root filesystems from mmdebstrap, imported into the containers storage that buildah
# and podman share, handed to the Dockerfile through its PYTHON_IMAGE and JRE_IMAGE build arguments.
#
#   docker/local-bases.sh python PYTHON_REF    # or: docker/local-bases.sh jre JRE_REF
#
# They stand in for python:3.11-slim-bookworm (Debian's Python 3.11 with pip, made to look like the
# official image: `python` and `pip` on PATH, no EXTERNALLY-MANAGED marker, ca-certificates, tzdata)
# and for eclipse-temurin's JRE (Debian's OpenJDK 17 JRE copied to /opt/java/openjdk, where the
# Dockerfile takes it from). An existing image of the same name is kept.
set -eu

if [ "$#" -ne 2 ] || { [ "$1" != python ] && [ "$1" != jre ]; }; then
    echo "usage: $0 python|jre REF" >&2
    exit 2
fi
base=$1
ref=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

have() { podman image exists "$1"; }
# dpkg's fsync of every unpacked file is most of a base's time on a loaded machine (4.5 minutes against
# under 2 without it): the root filesystem only becomes a tarball, so there is nothing to keep safe
# across a crash (a failed run is rerun). The setting is mmdebstrap's file in the root, removed after.
unsafe_io() {
    mmdebstrap --quiet --variant=minbase --dpkgopt=force-unsafe-io \
        --customize-hook='rm -f "$1"/etc/dpkg/dpkg.cfg.d/99mmdebstrap' "$@"
}

if [ "$base" = python ] && ! have "$ref"; then
    unsafe_io \
        --include=python3,python3-pip,python3-venv,ca-certificates,netbase,tzdata \
        --customize-hook='ln -sf /usr/bin/python3 "$1/usr/local/bin/python"' \
        --customize-hook='ln -sf /usr/bin/pip3 "$1/usr/local/bin/pip"' \
        --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED' \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
        bookworm "$work/python.tar"
    podman import --change 'CMD ["python3"]' "$work/python.tar" "$ref" >/dev/null
    rm -f "$work/python.tar"
fi

if [ "$base" = jre ] && ! have "$ref"; then
    # Debian's JRE keeps its configuration and CA store under /etc through absolute symbolic links;
    # copied with -L inside the chroot, /opt/java/openjdk is a self-contained JRE like Temurin's.
    unsafe_io --include=openjdk-17-jre-headless,ca-certificates-java \
        --customize-hook='mkdir -p "$1/opt/java" && chroot "$1" cp -rL /usr/lib/jvm/java-17-openjdk-amd64 /opt/java/openjdk' \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
        bookworm "$work/jre.tar"
    podman import "$work/jre.tar" "$ref" >/dev/null
    rm -f "$work/jre.tar"
fi
