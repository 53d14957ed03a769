"""Start one container process in a private mount namespace (run by the process kubelet, as root).

``python -I pod_launcher.py SPEC.json`` reads the launch spec the kubelet wrote, then:
unshares the mount namespace (so nothing it mounts is seen by the host), makes every mount private,
bind-mounts each volume onto its ``mountPath`` (creating a missing mount point, as a container runtime
does), remounts the ``readOnly`` ones read-only (the kernel then refuses writes, even root's, with EROFS),
drops to the container's user and groups, changes to its working directory and execs the command.
Standard library only: it runs with ``-I`` before any project code. A failure before exec is written to
``spec["start_error_file"]`` and exits 128, which the kubelet reports as reason ``StartError``.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

CLONE_NEWNS = 0x00020000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1

_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, flags: int) -> None:
    _check(
        _libc.mount(source.encode() if source else None, target.encode(), None, ctypes.c_ulong(flags), None),
        f"mount {source or ''} -> {target}",
    )


def _mount_point(target: Path, is_file: bool) -> None:
    if target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    if is_file:
        target.touch()
    else:
        target.mkdir()


def launch(spec: dict[str, Any]) -> None:
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", MS_REC | MS_PRIVATE)  # our mounts must not propagate back to the host
    for mount in spec["mounts"]:
        source, target = mount["source"], Path(mount["target"])
        _mount_point(target, Path(source).is_file())
        _mount(source, str(target), MS_BIND | MS_REC)
        if mount["read_only"]:
            _mount(None, str(target), MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    gid, uid = spec.get("gid"), spec.get("uid")
    if uid is not None:
        os.setgroups(list(spec.get("groups", [])))
        os.setgid(gid if gid is not None else 0)
        os.setuid(uid)
        # A credential change clears the parent-death signal; the process must still die with the kubelet.
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    os.chdir(spec["working_dir"])
    argv = spec["argv"]
    os.execvpe(argv[0], argv, spec["env"])


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    try:
        launch(spec)
    except OSError as exc:
        message = f"could not start container: {exc}"
        Path(spec["start_error_file"]).write_text(message)
        print(message, file=sys.stderr, flush=True)
        os._exit(128)


if __name__ == "__main__":
    main()
