#!/bin/sh
# What docker/build_images.py needs on a machine without a Docker engine (Debian, as root: this project's
# CI machines): buildah to build, podman and runc to run (crun refuses hybrid cgroup hierarchies), and
# mmdebstrap for the local base images. Nothing is done when they are all there.
set -eu

missing=""
for tool in buildah podman runc mmdebstrap; do
    command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "$0: missing$missing; install them (Debian: apt-get install buildah podman runc mmdebstrap) or run a Docker engine" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# shellcheck disable=SC2086 # the tool names are the package names
apt-get install -y -q $missing
