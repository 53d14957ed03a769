"""Start one container process in private mount and UTS namespaces (run by the process kubelet, as root).

``python -I pod_launcher.py SPEC.json`` reads the launch spec the kubelet wrote, then: unshares the
mount and UTS namespaces (nothing it mounts is seen by the host; the hostname is the pod's name), makes
every mount private, makes the directories the image's files live under traversable for a non-root
container user (our "images" are the host's Python and this checkout, which may sit under a 0700 home),
bind-mounts each volume onto its ``mountPath`` (creating a missing mount point on the host, as a
runtime does in the image's root), remounts the ``readOnly`` ones read-only (the kernel then refuses
writes, even root's, with EROFS; ``readOnlyRootFilesystem`` makes every other mount read-only first,
the volumes staying as asked), drops to the container's user and groups, changes to its working
directory and execs the command.
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
CLONE_NEWUTS = 0x04000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
SYS_MOUNT_SETATTR = 442  # x86-64
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1

_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(
    source: str | None, target: str, flags: int, fstype: str | None = None, data: str | None = None
) -> None:
    _check(
        _libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {source or ''} -> {target}",
    )


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _read_only_root() -> None:
    """readOnlyRootFilesystem: every mount of this namespace read-only (volumes are mounted after)."""
    attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    result = _libc.syscall(
        SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)
    )
    _check(result, "mount_setattr(/, read-only, recursive)")
    try:
        _mount(None, "/dev/shm", MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV)  # a container's is writable
    except OSError:
        pass  # no separate /dev/shm on this host


def _open_up(directory: str) -> None:
    """Let the container user traverse ``directory`` in this mount namespace only: a tmpfs of mode 0711
    goes over it and every original entry is bind-mounted back, keeping its own owner and mode."""
    fd = os.open(directory, os.O_PATH | os.O_DIRECTORY)
    original = f"/proc/self/fd/{fd}"  # still the hidden directory once the tmpfs covers its path
    names = os.listdir(original)
    _mount("tmpfs", directory, MS_NOSUID | MS_NODEV, "tmpfs", "mode=0711")
    for name in names:
        source, target = f"{original}/{name}", os.path.join(directory, name)
        if os.path.islink(source):
            os.symlink(os.readlink(source), target)
            continue
        if os.path.isdir(source):
            os.mkdir(target)
        else:
            open(target, "w").close()
        _mount(source, target, MS_BIND | MS_REC)
    os.close(fd)


def _mount_point(target: Path, is_file: bool) -> None:
    if target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    if is_file:
        target.touch()
    else:
        target.mkdir()


def _keep_image_visible(image: dict[str, int], targets: list[Path], read_only_root: bool) -> None:
    """Bind the image's files back where a volume covered them. A real container's image is its own root
    filesystem, so an emptyDir on /tmp cannot hide it; here the "image" is host paths (the checkout and
    its venv), which an emptyDir on /tmp would hide when the checkout lives under /tmp."""
    for path, fd in image.items():
        covered = any(Path(path).is_relative_to(t) and Path(path) != t for t in targets)
        if covered:
            os.makedirs(path, exist_ok=True)  # inside the covering volume, in this namespace's view
            _mount(f"/proc/self/fd/{fd}", path, MS_BIND | MS_REC)
            if read_only_root:  # image files stay as read-only as the root they belong to
                _mount(None, path, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
        os.close(fd)


def launch(spec: dict[str, Any]) -> None:
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWUTS), "unshare(CLONE_NEWNS | CLONE_NEWUTS)")
    hostname = spec["hostname"].encode()
    _check(_libc.sethostname(hostname, len(hostname)), "sethostname")  # the pod's name, as in a container
    _mount(None, "/", MS_REC | MS_PRIVATE)  # our mounts must not propagate back to the host
    # Held open before any mount: a later one (an emptyDir on /tmp, say) may cover a source's path. Opened
    # after unshare, because a bind mount's source must belong to this mount namespace.
    sources = [os.open(mount["source"], os.O_PATH) for mount in spec["mounts"]]
    image = {path: os.open(path, os.O_PATH) for path in spec.get("image_paths", []) if os.path.exists(path)}
    for directory in spec.get("open_up", []):
        _open_up(directory)
    read_only_root = bool(spec.get("read_only_root"))
    if read_only_root:
        for mount in spec["mounts"]:  # mount points must exist before the root turns read-only
            _mount_point(Path(mount["target"]), os.path.isfile(mount["source"]))
        _read_only_root()
    for mount, fd in zip(spec["mounts"], sources):
        source, target = f"/proc/self/fd/{fd}", Path(mount["target"])
        _mount_point(target, os.path.isfile(source))
        _mount(source, str(target), MS_BIND | MS_REC)
        if mount["read_only"]:
            _mount(None, str(target), MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
        elif read_only_root:  # a bind mount inherits the read-only flag of the mount it comes from
            _mount(None, str(target), MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV)
        os.close(fd)
    _keep_image_visible(image, [Path(m["target"]) for m in spec["mounts"]], read_only_root)
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
    # Opened now, as root: the container user may not reach the kubelet's directory. Closed by exec.
    errors = open(spec["start_error_file"], "w")
    try:
        launch(spec)
    except OSError as exc:
        message = f"could not start container: {exc}"
        errors.write(message)
        errors.close()
        print(message, file=sys.stderr, flush=True)
        os._exit(128)


if __name__ == "__main__":
    main()
