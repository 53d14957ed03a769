"""Build the Dockerfile's two targets once per set of inputs (``make images``; the tests' container mode).

    python3 docker/build_images.py [--repo tierkeeper] [--version 0.1.0]  # build what is missing
    python3 docker/build_images.py --check   # only look: exit 1 unless both are built

Either prints {"engine": ..., "images": {repository: image}} as JSON on stdout (the builders' output
goes to stderr). The inputs are hashed: the Dockerfile and every file it copies (pyproject.toml,
constraints.txt, README.md, docker/install-venv.sh, the package sources), the engine, and how the local
bases are made. Each image is tagged ``tierkeeper/<target>:inputs-<hash>`` (what the tests run) and
``<repo>/<target>:<version>``; an image whose inputs tag exists is not built again, so a second
``make test`` costs a lookup.

With a running Docker engine the build is ``docker build`` with the Dockerfile's pinned bases. Otherwise
(no engine, no Docker Hub: this project's CI machines) it is ``buildah build`` with base images made
locally by docker/local-bases.sh and passed through the PYTHON_IMAGE and JRE_IMAGE build arguments, into
the containers storage podman runs from; docker/install-build-tools.sh installs what that needs.
Standard library only: it runs before any venv exists.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"operator": "tierkeeper/operator", "pipeline": "tierkeeper/pipeline"}
# Stand-ins for the Dockerfile's pinned bases where Docker Hub cannot be reached (docker/local-bases.sh).
LOCAL_PYTHON = "localhost/tierkeeper-base/python:3.11-bookworm"
LOCAL_JRE = "localhost/tierkeeper-base/jre:17-bookworm"
# One build at a time on a machine: a second caller (another checkout's tests, say) waits, then finds
# the images the first one built instead of building the same layers beside it.
LOCK = Path("/var/tmp/tierkeeper-images.lock")
# What the Dockerfile reads (its COPY sources), and itself.
INPUT_FILES = ("Dockerfile", "pyproject.toml", "constraints.txt", "README.md", "docker/install-venv.sh")
INPUT_TREES = ("storage_core", "operator")


def _files() -> list[Path]:
    files = [ROOT / name for name in INPUT_FILES]
    for tree in INPUT_TREES:
        files += [
            path
            for path in (ROOT / tree).rglob("*")
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
        ]
    return sorted(files)


def inputs_hash(engine: str) -> str:
    digest = hashlib.sha256(engine.encode())
    if engine != "docker":  # the local bases are what this script makes them (Docker's: pinned by digest)
        digest.update((ROOT / "docker" / "local-bases.sh").read_bytes())
    for path in _files():
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def docker_engine() -> bool:
    """A Docker engine answers (a docker client alone is not one)."""
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, check=False).returncode == 0


def _exists(engine: str, ref: str) -> bool:
    tool = "docker" if engine == "docker" else "podman"
    if shutil.which(tool) is None:
        return False
    command = [tool, "image", "inspect", ref] if engine == "docker" else [tool, "image", "exists", ref]
    return subprocess.run(command, capture_output=True, check=False).returncode == 0


def refs(engine: str) -> dict[str, str]:
    """The image each of our repositories runs as, for the current inputs (built or not)."""
    prefix = "" if engine == "docker" else "localhost/"
    tag = f"inputs-{inputs_hash(engine)}"
    return {repo: f"{prefix}{repo}:{tag}" for repo in TARGETS.values()}


def _run(command: list[str]) -> None:
    print("+", " ".join(command), file=sys.stderr, flush=True)
    # The builders' output goes to stderr (stdout carries the one JSON line the tests read), each line
    # with the seconds since the command started: where a slow build spends its time.
    started = time.monotonic()
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            text = line.decode(errors="replace").rstrip()
            print(f"[{time.monotonic() - started:5.0f}s] {text}", file=sys.stderr, flush=True)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, command)


def _pip_cache() -> Path:
    """The host's pip cache (pip's own default place), which the test venv's install filled."""
    configured = os.environ.get("PIP_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pip"


def _bases() -> dict[str, subprocess.Popen[bytes]]:
    """Make the local bases side by side (each is mostly apt installing packages, little of it downloads)."""
    script = str(ROOT / "docker" / "local-bases.sh")
    return {
        name: subprocess.Popen(["sh", script, name, ref], stdout=sys.stderr)
        for name, ref in (("python", LOCAL_PYTHON), ("jre", LOCAL_JRE))
    }


def _wait(process: subprocess.Popen[bytes]) -> None:
    if process.wait() != 0:
        raise subprocess.CalledProcessError(process.returncode, process.args)


def build(engine: str, repo: str, version: str) -> None:
    bases: dict[str, subprocess.Popen[bytes]] = {}
    if engine == "docker":
        command = ["docker", "build"]
        args: list[str] = []
    else:
        _run(["sh", str(ROOT / "docker/install-build-tools.sh")])
        bases = _bases()
        # --layers keeps every stage whose inputs did not change (the dependencies' stages are keyed by
        # constraints.txt alone); --network host because the pip stages reach the package index; the
        # host's CA bundle goes over the one in the build containers so an egress proxy with its own CA
        # is trusted (Debian's pip uses the system bundle); the host's pip cache is mounted where the
        # pip stages look for one (PIP_CACHE), so what the test venv downloaded and built is reused.
        cache = _pip_cache()
        cache.mkdir(parents=True, exist_ok=True)
        command = ["buildah", "build", "--layers", "--pull=never", "--network", "host"]
        args = [
            f"--build-arg=PYTHON_IMAGE={LOCAL_PYTHON}",
            f"--build-arg=JRE_IMAGE={LOCAL_JRE}",
            f"--volume={cache}:/pip-cache",
            "--build-arg=PIP_CACHE=/pip-cache",
        ]
        bundle = Path("/etc/ssl/certs/ca-certificates.crt")
        if bundle.is_file():
            args.append(f"--volume={bundle}:{bundle}:ro")
    wanted = refs(engine)
    for target, repository in TARGETS.items():
        # The operator target needs only the Python base; the JRE base goes on being made meanwhile.
        for name in ("python",) if target == "operator" else ("python", "jre"):
            if name in bases:
                _wait(bases[name])
        if _exists(engine, wanted[repository]):
            continue
        started = time.monotonic()
        prefix = "" if engine == "docker" else "localhost/"
        tags = ["-t", wanted[repository], "-t", f"{prefix}{repo}/{target}:{version}"]
        _run([*command, *args, "--target", target, *tags, "."])
        print(
            f"built {wanted[repository]} in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default="tierkeeper", help="registry path of the version tags")
    # The package version and the chart's appVersion (tests/k8s/test_k8s_chart_knobs.py holds them equal).
    parser.add_argument("--version", default="0.1.0")
    parser.add_argument("--check", action="store_true", help="build nothing; exit 1 unless both are built")
    options = parser.parse_args()
    engine = "docker" if docker_engine() else "buildah"
    if options.check:
        wanted = refs(engine)
        if not all(_exists(engine, ref) for ref in wanted.values()):
            print(f"images not built for the current inputs ({engine}): run `make images`", file=sys.stderr)
            return 1
    else:
        with open(LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            build(engine, options.repo, options.version)
        wanted = refs(engine)
    print(json.dumps({"engine": engine, "images": wanted}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
