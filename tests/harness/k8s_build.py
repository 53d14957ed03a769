"""Build kube-apiserver and kube-controller-manager from the published Go module, once per pinned version.

The module ``k8s.io/kubernetes`` cannot be ``go install``ed: its go.mod replaces every ``k8s.io/<name>``
staging module with ``./staging/src/k8s.io/<name>``, a path the module zip leaves out. So we download the
module with the Go toolchain, copy it to a writable directory, drop ``vendor/`` and ``go.work*``, point each
of those replacements at the released staging module of the same version (``k8s.io/<name> vX.Y.Z`` with
X=0) and build the two commands with ``-mod=mod``. The binaries land in ``<cache>/k8s-<version>/bin``;
a marker holding the version and recipe digest makes later runs skip the build, and a file lock makes a
second concurrent pytest run wait for the first build instead of starting its own.

``python -m harness.k8s_build`` builds (``make harness`` does it); the first build takes ~10 minutes
on 2 cores, later ones reuse Go's module and build caches.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from harness.k8s_version import KUBERNETES_VERSION, staging_version
from harness.kafka_dist import HarnessError
from harness.paths import cache_dir

COMMANDS = ("kube-apiserver", "kube-controller-manager")
# Bump when the recipe below changes, so a cached build made the old way is rebuilt.
RECIPE = "1"
_REPLACE = re.compile(r"^(\s*)(k8s\.io/[a-z0-9-]+) => \./staging/src/k8s\.io/[a-z0-9-]+\s*$", re.MULTILINE)


def k8s_dir(version: str = KUBERNETES_VERSION) -> Path:
    return cache_dir() / f"k8s-{version}"


def bin_dir(version: str = KUBERNETES_VERSION) -> Path:
    return k8s_dir(version) / "bin"


def _marker_text(version: str) -> str:
    return hashlib.sha256(f"{version}/{RECIPE}/{','.join(COMMANDS)}".encode()).hexdigest()[:16]


def _is_built(version: str) -> bool:
    marker = k8s_dir(version) / "COMPLETE"
    return (
        marker.is_file()
        and marker.read_text().strip() == _marker_text(version)
        and all(os.access(bin_dir(version) / name, os.X_OK) for name in COMMANDS)
    )


@contextlib.contextmanager
def _build_lock(version: str) -> Iterator[None]:
    lock_path = cache_dir() / f"k8s-{version}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent run waits here until the first build is done
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def rewrite_go_mod(text: str, staging: str) -> str:
    """Point the staging replacements of k8s.io/kubernetes's go.mod at the released staging modules."""
    rewritten = _REPLACE.sub(lambda m: f"{m.group(1)}{m.group(2)} => {m.group(2)} {staging}", text)
    if "./staging/" in rewritten:
        raise HarnessError("go.mod of k8s.io/kubernetes still refers to ./staging/ after the rewrite")
    return rewritten


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise HarnessError("the Go toolchain (go) is not on PATH: it builds kube-apiserver once per version")
    return go


def _run(argv: list[str], *, cwd: Path | None, env: dict[str, str], log: Path) -> str:
    with open(log, "a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        proc = subprocess.run(
            argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=out, text=True, check=False
        )
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise HarnessError(f"{' '.join(argv[:3])} ... exited with {proc.returncode}; end of {log}:\n{tail}")
    return proc.stdout


def _ldflags(version: str) -> str:
    # What the upstream release build stamps, so /version reports the real version (helm checks
    # the chart's kubeVersion against it).
    major, minor, _ = version.lstrip("v").split(".")
    pkg = "k8s.io/component-base/version"
    stamps = {"gitVersion": version, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean"}
    return " ".join(f"-X {pkg}.{name}={value}" for name, value in stamps.items())


def _build(version: str, log: Path) -> None:
    go = _go()
    env = {**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0", "GOWORK": "off"}
    info = json.loads(
        _run([go, "mod", "download", "-json", f"k8s.io/kubernetes@{version}"], cwd=None, env=env, log=log)
    )
    src = k8s_dir(version) / "src"
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(info["Dir"], src)  # the module cache is read-only; the copy is ours to edit
    for path in [src, *src.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | 0o200)
    shutil.rmtree(src / "vendor", ignore_errors=True)
    for name in ("go.work", "go.work.sum"):
        (src / name).unlink(missing_ok=True)
    go_mod = src / "go.mod"
    go_mod.write_text(rewrite_go_mod(go_mod.read_text(), staging_version(version)))
    target = bin_dir(version)
    target.mkdir(parents=True, exist_ok=True)
    for name in COMMANDS:
        partial = target / f"{name}.partial"
        # -trimpath keeps source paths out of the build cache keys, so a rebuild elsewhere reuses it.
        _run(
            [go, "build", "-trimpath", "-ldflags", _ldflags(version), "-o", str(partial), f"./cmd/{name}"],
            cwd=src,
            env=env,
            log=log,
        )
        os.replace(partial, target / name)
    shutil.rmtree(src, ignore_errors=True)


def ensure_kubernetes(version: str = KUBERNETES_VERSION, *, announce: bool = True) -> Path:
    """Directory holding the built ``kube-apiserver`` and ``kube-controller-manager`` for ``version``."""
    if _is_built(version):
        return bin_dir(version)
    with _build_lock(version):
        if _is_built(version):  # built by a concurrent run while we waited for the lock
            return bin_dir(version)
        k8s_dir(version).mkdir(parents=True, exist_ok=True)
        (k8s_dir(version) / "COMPLETE").unlink(missing_ok=True)
        log = k8s_dir(version) / "build.log"
        log.write_text("")
        if announce:
            print(f"[harness] building Kubernetes {version} (first time ~10 min; log {log})", file=sys.stderr)
        started = time.monotonic()
        _build(version, log)
        (k8s_dir(version) / "COMPLETE").write_text(_marker_text(version) + "\n")
        if announce:
            print(
                f"[harness] built Kubernetes {version} in {time.monotonic() - started:.0f}s", file=sys.stderr
            )
    return bin_dir(version)


if __name__ == "__main__":
    try:
        print(ensure_kubernetes())
    except HarnessError as exc:
        print(f"[harness] {exc}", file=sys.stderr)
        sys.exit(1)
