"""One pod, run by the process kubelet: volumes, init containers, then containers, as local processes.

Status is reported like a kubelet does: container states (waiting/running/terminated with exit code,
reason and the terminationMessagePath content), restart counts, the pod conditions and phase
(Succeeded/Failed once no container will run again under the pod's restartPolicy). Deletion stops the
processes (SIGTERM to the process group, the grace period, then SIGKILL) and then deletes the pod
with grace period 0, which is the kubelet's part of a graceful deletion.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.kube_rest import ApiError, KubeRest
from harness.pod_container import START_FAILURE, engine_for, run_command
from harness.pod_images import ImageCommand, repository_of
from harness.pod_spec import (
    ConfigMissing,
    PodSpecError,
    VolumeSource,
    container_argv,
    container_env,
    prepare_volumes,
)

if TYPE_CHECKING:
    from harness.kubelet import ProcessKubelet

LAUNCHER = Path(__file__).with_name("pod_launcher.py")
DEFAULT_TERMINATION_PATH = "/dev/termination-log"
MAX_BACKOFF = 10.0


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _new_session() -> None:
    os.setsid()  # the container is a process group of its own: deletion signals all of it
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # and it dies with the kubelet


@dataclass
class ContainerRecord:
    spec: dict[str, Any]
    init: bool
    state: dict[str, Any] = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: dict[str, Any] = field(default_factory=dict)
    restart_count: int = 0
    attempt: int = 0
    proc: subprocess.Popen[bytes] | None = None
    container: tuple[str, str] | None = None  # container mode: (engine, name) of the current run
    runtime_ids: tuple[str, str] | None = None  # container mode: (containerID, imageID) of the last run

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def status(self) -> dict[str, Any]:
        running = "running" in self.state
        container_id = f"harness://{self.proc.pid}" if self.proc is not None else None
        image_id = f"harness://{repository_of(self.spec['image'])}"
        if self.runtime_ids is not None:
            container_id, image_id = self.runtime_ids
        return {
            "name": self.name,
            "image": self.spec["image"],
            "imageID": image_id,
            "containerID": container_id,
            "ready": running and not self.init,
            "started": running,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }


class PodWorker(threading.Thread):
    def __init__(self, kubelet: ProcessKubelet, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['namespace']}/{meta['name']}", daemon=True)
        self.kubelet = kubelet
        self.pod = pod
        self.rest: KubeRest = kubelet.rest()
        self.directory = kubelet.pod_directory(meta["namespace"], meta["name"], meta["uid"])
        self.stopping = threading.Event()
        self.grace = float(pod["spec"].get("terminationGracePeriodSeconds", 30))
        self.forgotten = False  # the pod object is gone: nothing left to report
        self.killed = False  # the kubelet itself stops: kill at once, report nothing
        self._lock = threading.Lock()
        self._phase = "Pending"
        self._reason: str | None = None
        self._message: str | None = None
        self._start_time = now()
        self._transitions: dict[str, tuple[str, str]] = {}
        spec = pod["spec"]
        self.init_records = [ContainerRecord(c, init=True) for c in spec.get("initContainers", [])]
        self.records = [ContainerRecord(c, init=False) for c in spec["containers"]]
        self._init_done = not self.init_records

    # -- requests from the kubelet ----------------------------------------------------------------------

    def request_stop(self, grace: float | None) -> None:
        if grace is not None:
            self.grace = min(self.grace, grace)
        self.stopping.set()

    def kill_now(self) -> None:
        self.killed = True
        self.grace = 0
        self.stopping.set()
        for record in self.init_records + self.records:
            if record.proc is not None and record.proc.poll() is None:
                _signal_group(record.proc, signal.SIGKILL)
            if record.container is not None:  # a killed `podman run` leaves its container running
                engine, name = record.container
                engine_for(engine).remove(name)

    # -- the pod's life ---------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._run_pod()
        except Exception as exc:  # noqa: BLE001 - a harness bug must show in the pod, not vanish in a thread
            self.kubelet.errors.append(f"{self.pod_key}: {exc!r}")
            self._finish("Failed", "KubeletError", f"process kubelet error: {exc!r}")
        if self.stopping.is_set() and not self.killed:
            self._finalize_deletion()

    def _run_pod(self) -> None:
        unknown = [c for c in self.init_records + self.records if self._image(c) is None]
        if unknown:
            known = ", ".join(sorted(self.kubelet.images))
            for record in unknown:
                message = (
                    f"image {record.spec['image']!r} is not in the process kubelet's image table ({known})"
                )
                record.state = {"waiting": {"reason": "ErrImagePull", "message": message}}
            if self.pod["spec"].get("restartPolicy", "Always") == "Always":
                # As a kubelet does: the pod stays Pending (a controller replacing a Failed pod at once
                # would only make another one that fails the same way).
                self._report()
                self.stopping.wait()
                return
            self._finish("Failed", "ErrImagePull", unknown[0].state["waiting"]["message"])
            return
        volumes = self._with_config_retry(self._volumes)
        if volumes is None:
            return
        for record in self.init_records:
            if not self._run_to_success(record, volumes):
                return
        self._init_done = True
        threads = [
            threading.Thread(target=self._run_main, args=(r, volumes), daemon=True) for r in self.records
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if self.stopping.is_set():
            return
        failed = any(r.state.get("terminated", {}).get("exitCode", 1) != 0 for r in self.records)
        self._finish("Failed" if failed else "Succeeded", None, None)

    def _volumes(self) -> dict[str, VolumeSource]:
        fs_group = self.pod["spec"].get("securityContext", {}).get("fsGroup")
        return prepare_volumes(self.rest, self.pod, self.directory / "volumes", fs_group)

    def _with_config_retry(self, step: Any) -> Any:
        """Run ``step`` until what it refers to exists (reported as CreateContainerConfigError meanwhile)."""
        while not self.stopping.is_set():
            try:
                return step()
            except ConfigMissing as exc:
                for record in self.init_records + self.records:
                    record.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
                self._report()
                self.stopping.wait(1.0)
            except PodSpecError as exc:
                self._finish("Failed", "PodSpecError", str(exc))
                return None
        return None

    def _restart_policy(self, record: ContainerRecord) -> str:
        policy = str(self.pod["spec"].get("restartPolicy", "Always"))
        return "OnFailure" if record.init and policy == "Always" else policy

    def _run_to_success(self, record: ContainerRecord, volumes: dict[str, VolumeSource]) -> bool:
        """An init container: run until it exits 0 (or fail the pod under restartPolicy Never)."""
        backoff = 1.0
        while not self.stopping.is_set():
            code = self._run_once(record, volumes)
            if code == 0:
                return True
            if code is None or self.stopping.is_set():
                return False
            if self._restart_policy(record) == "Never":
                self._finish("Failed", None, None)
                return False
            backoff = self._back_off(record, backoff)
        return False

    def _run_main(self, record: ContainerRecord, volumes: dict[str, VolumeSource]) -> None:
        backoff = 1.0
        while not self.stopping.is_set():
            code = self._run_once(record, volumes)
            policy = self._restart_policy(record)
            if (
                code is None
                or self.stopping.is_set()
                or policy == "Never"
                or (policy == "OnFailure" and code == 0)
            ):
                return
            backoff = self._back_off(record, backoff)

    def _back_off(self, record: ContainerRecord, backoff: float) -> float:
        record.last_state = record.state
        record.restart_count += 1
        record.state = {"waiting": {"reason": "CrashLoopBackOff", "message": f"back-off {backoff:.0f}s"}}
        self._report()
        self.stopping.wait(backoff)
        return min(backoff * 2, MAX_BACKOFF)

    def _image(self, record: ContainerRecord) -> ImageCommand | None:
        return self.kubelet.images.get(repository_of(record.spec["image"]))

    def _identity(
        self, record: ContainerRecord, image: ImageCommand
    ) -> tuple[int | None, int | None, list[int]]:
        pod_ctx = self.pod["spec"].get("securityContext", {})
        ctx = {**pod_ctx, **record.spec.get("securityContext", {})}
        uid = ctx.get("runAsUser", image.user)
        gid = ctx.get("runAsGroup", image.group if uid == image.user else None)
        if ctx.get("runAsNonRoot") and (uid is None or uid == 0):
            raise PodSpecError(f"container {record.name} has runAsNonRoot and its image will run as root")
        groups = [
            g for g in [pod_ctx.get("fsGroup"), *pod_ctx.get("supplementalGroups", [])] if g is not None
        ]
        return uid, gid, groups

    def _run_once(self, record: ContainerRecord, volumes: dict[str, VolumeSource]) -> int | None:
        """Start the container once and wait for it; its exit code, or None if the pod failed to start it."""
        image = self._image(record)
        assert image is not None
        base = {
            **image.env,
            "HOSTNAME": self.pod["metadata"]["name"],
            **self.kubelet.service_env(),
        }
        env = self._with_config_retry(lambda: container_env(self.rest, self.pod, record.spec, base))
        if env is None:
            return None
        try:
            argv = container_argv(record.spec, image, env)
            uid, gid, groups = self._identity(record, image)
            mounts = self._mounts(record, volumes)
        except PodSpecError as exc:
            record.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
            self._finish("Failed", "PodSpecError", str(exc))
            return None
        directory = self.directory / "containers" / record.name
        directory.mkdir(parents=True, exist_ok=True)
        termination, start_error = directory / "termination-log", directory / "start-error"
        termination.write_bytes(b"")
        termination.chmod(0o666)  # the container user writes it
        start_error.unlink(missing_ok=True)
        mounts.append(
            {
                "source": str(termination),
                "target": record.spec.get("terminationMessagePath", DEFAULT_TERMINATION_PATH),
                "read_only": False,
            }
        )
        if image.container is None:
            mounts += account_files(directory, image.accounts)
        mounts.sort(key=lambda mount: Path(mount["target"]).parts)  # a mount inside another goes after it
        if image.container is not None:
            return self._run_container(record, image, argv, env, mounts, (uid, gid, groups), termination)
        spec = {
            "argv": argv,
            "env": env,
            "working_dir": record.spec.get("workingDir") or image.working_dir,
            "mounts": mounts,
            "uid": uid,
            "gid": gid,
            "groups": groups,
            "start_error_file": str(start_error),
            "open_up": closed_ancestors(image.needs) if uid else [],
            "image_paths": list(image.needs),
            "hostname": self.pod["spec"].get("hostname") or self.pod["metadata"]["name"],
            "read_only_root": bool(record.spec.get("securityContext", {}).get("readOnlyRootFilesystem")),
        }
        spec_file = directory / f"launch-{record.attempt}.json"
        spec_file.write_text(json.dumps(spec))
        log = directory / f"{record.attempt}.log"
        self.kubelet.note_run(self.pod["metadata"], record, log)
        record.attempt += 1
        started = now()
        with open(log, "ab") as out:
            record.proc = subprocess.Popen(
                [sys.executable, "-I", str(LAUNCHER), str(spec_file)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={},
                cwd="/",
                preexec_fn=_new_session,
            )
        record.state = {"running": {"startedAt": started}}
        self._report()
        code = self._wait(record.proc)
        message = termination.read_text(errors="replace")[:4096]
        reason = "Completed" if code == 0 else "Error"
        start_failure = start_error.read_text(errors="replace") if start_error.exists() else ""
        if start_failure:
            reason, message = "StartError", start_failure
        return self._terminated(record, code, reason, message, started, log)

    def _run_container(
        self,
        record: ContainerRecord,
        image: ImageCommand,
        argv: list[str],
        env: dict[str, str],
        mounts: list[dict[str, Any]],
        identity: tuple[int | None, int | None, list[int]],
        termination: Path,
    ) -> int:
        """Container mode (harness.pod_container): the same start, through ``podman run``."""
        assert image.container is not None
        engine = engine_for(image.engine)
        self.kubelet.engines_used.add(image.engine)
        meta = self.pod["metadata"]
        name = f"tk-{meta['uid'][:8]}-{record.name}-{record.attempt}"
        uid, gid, groups = identity
        command = run_command(
            engine,
            name=name,
            label=str(self.kubelet.workdir),
            image=image.container,
            argv=argv,
            env=env,
            working_dir=record.spec.get("workingDir") or image.working_dir,
            mounts=mounts,
            uid=uid,
            gid=gid,
            groups=groups,
            hostname=self.pod["spec"].get("hostname") or meta["name"],
            security=record.spec.get("securityContext", {}),
        )
        log = self.directory / "containers" / record.name / f"{record.attempt}.log"
        self.kubelet.note_run(meta, record, log)
        record.attempt += 1
        started = now()
        record.container = (image.engine, name)
        record.runtime_ids = (f"{image.engine}://{name}", f"{image.engine}://{image.container}")
        with open(log, "ab") as out:
            record.proc = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd="/",
                preexec_fn=_new_session,
            )
        record.state = {"running": {"startedAt": started}}
        self._report()
        code = self._wait(record.proc)
        engine.remove(name)
        record.container = None
        message = termination.read_text(errors="replace")[:4096]
        reason = "Completed" if code == 0 else "Error"
        if code == START_FAILURE:  # the runtime's own failure: its words are the last lines of the log
            reason, message = "StartError", "\n".join(log.read_text(errors="replace").splitlines()[-5:])
        return self._terminated(record, code, reason, message, started, log)

    def _terminated(
        self, record: ContainerRecord, code: int, reason: str, message: str, started: str, log: Path
    ) -> int:
        """Report the finished run's terminated state and return its exit code."""
        # A start failure keeps the runtime's words: the container's log is not its message.
        if (
            reason != "StartError"
            and not message
            and code != 0
            and record.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError"
        ):
            message = "\n".join(log.read_text(errors="replace").splitlines()[-80:])[-2048:]
        terminated = {"exitCode": code, "reason": reason, "startedAt": started, "finishedAt": now()}
        if message:
            terminated["message"] = message
        record.state = {"terminated": terminated}
        self._report()
        return code

    def _mounts(self, record: ContainerRecord, volumes: dict[str, VolumeSource]) -> list[dict[str, Any]]:
        mounts = []
        for mount in record.spec.get("volumeMounts", []):
            if mount["name"] not in volumes:
                raise PodSpecError(f"container {record.name}: volumeMount {mount['name']!r} has no volume")
            volume = volumes[mount["name"]]
            source = volume.path / mount["subPath"] if mount.get("subPath") else volume.path
            if mount.get("subPath"):
                source.mkdir(parents=True, exist_ok=True)
            mounts.append(
                {
                    "source": str(source),
                    "target": mount["mountPath"],
                    "read_only": bool(mount.get("readOnly")) or volume.read_only,
                }
            )
        return mounts

    def _wait(self, proc: subprocess.Popen[bytes]) -> int:
        while proc.poll() is None and not self.stopping.is_set():
            try:
                proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=self.grace)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
        code = proc.returncode
        return 128 - code if code < 0 else code  # killed by signal N: 128+N, as container runtimes report

    # -- status ------------------------------------------------------------------------------------------

    @property
    def pod_key(self) -> str:
        return f"{self.pod['metadata']['namespace']}/{self.pod['metadata']['name']}"

    def _finish(self, phase: str, reason: str | None, message: str | None) -> None:
        self._phase, self._reason, self._message = phase, reason, message
        self._report()

    def _condition(self, kind: str, value: bool) -> dict[str, Any]:
        status = "True" if value else "False"
        previous = self._transitions.get(kind)
        if previous is None or previous[0] != status:
            self._transitions[kind] = (status, now())
        return {"type": kind, "status": status, "lastTransitionTime": self._transitions[kind][1]}

    def _report(self) -> None:
        if self.forgotten or self.killed:
            return
        with self._lock:
            records = self.records
            if self._phase == "Pending" and self._init_done and any("running" in r.state for r in records):
                self._phase = "Running"
            ready = all("running" in r.state for r in records) and self._phase == "Running"
            status: dict[str, Any] = {
                "phase": self._phase,
                "reason": self._reason,
                "message": self._message,
                "hostIP": "127.0.0.1",
                "hostIPs": [{"ip": "127.0.0.1"}],
                "podIP": "127.0.0.1",
                "podIPs": [{"ip": "127.0.0.1"}],
                "startTime": self._start_time,
                "conditions": [
                    self._condition("PodScheduled", True),
                    self._condition("Initialized", self._init_done),
                    self._condition("ContainersReady", ready),
                    self._condition("Ready", ready),
                ],
                "initContainerStatuses": [r.status() for r in self.init_records] or None,
                "containerStatuses": [r.status() for r in records],
            }
            meta = self.pod["metadata"]
            try:
                self.rest.merge_patch(
                    f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status", {"status": status}
                )
            except ApiError as exc:
                if exc.code == 404:
                    self.forgotten = True
                else:
                    self.kubelet.errors.append(f"{self.pod_key}: status update: {exc}")
            except OSError as exc:
                self.kubelet.errors.append(f"{self.pod_key}: status update: {exc!r}")

    def _finalize_deletion(self) -> None:
        # Every process has exited (the waits above end only then): report, then remove the pod.
        self._report()
        self.kubelet.delete_now(self.pod)


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def account_files(directory: Path, accounts: Mapping[int, str]) -> list[dict[str, Any]]:
    """/etc/passwd and /etc/group as the image has them: the host's plus the image's own accounts."""
    if not accounts:
        return []
    mounts = []
    for name, line in (
        ("passwd", "{name}:x:{id}:{id}::/nonexistent:/usr/sbin/nologin"),
        ("group", "{name}:x:{id}:"),
    ):
        host = Path("/etc") / name
        text = host.read_text() if host.exists() else ""
        known = {entry.split(":")[2] for entry in text.splitlines() if entry.count(":") >= 2}
        extra = [line.format(name=user, id=uid) for uid, user in accounts.items() if str(uid) not in known]
        copy = directory / name
        copy.write_text(text + "".join(f"{entry}\n" for entry in extra))
        copy.chmod(0o644)
        mounts.append({"source": str(copy), "target": str(host), "read_only": True})
    return mounts


def closed_ancestors(paths: tuple[str, ...]) -> list[str]:
    """Directories above ``paths`` that other users cannot traverse, outermost first."""
    closed: set[str] = set()
    for path in paths:
        for directory in reversed(Path(path).resolve().parents):
            if not directory.stat().st_mode & 0o001:
                closed.add(str(directory))
    return sorted(closed, key=lambda d: (d.count("/"), d))


def pod_is_terminal(pod: Mapping[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")
