"""The process kubelet: the harness's stand-in for kubelet + container runtime (+ a trivial scheduler).

It registers Nodes (Ready, with capacity), binds every pending pod of the default scheduler to one of
them (round robin; nodeSelector on ``kubernetes.io/hostname`` is honoured, other constraints are not),
and runs the pods bound to its nodes as local processes through :class:`harness.pod_worker.PodWorker`:

- images map to local commands through :attr:`ProcessKubelet.images` (:mod:`harness.pod_images`), or,
  in container mode, to the images ``make images`` built, run by podman (:mod:`harness.pod_container`:
  there the security context's capabilities and privilege escalation apply too);
- command/args/workingDir/env (value, valueFrom secretKeyRef/configMapKeyRef/fieldRef, envFrom) as a
  kubelet resolves them, plus ``KUBERNETES_SERVICE_HOST/PORT`` pointing at the real API server;
- volumes (emptyDir, hostPath, PVC bound to a hostPath/local PersistentVolume, secret, configMap,
  downwardAPI, projected with ServiceAccount tokens from the TokenRequest API) are host directories
  bind-mounted at their mountPath in a private mount namespace per container, read-only where asked;
- runAsUser/runAsGroup/fsGroup/supplementalGroups, runAsNonRoot and readOnlyRootFilesystem are
  honoured; everything else of the security context, resource limits, probes and networking is not
  (every pod shares the host's network as 127.0.0.1; there is no kube-proxy);
- restartPolicy Always/OnFailure/Never with a capped back-off; ServiceAccount tokens are requested once
  per container start (1 h by default) and not refreshed.

Logs: ``kubelet.logs(namespace, pod, container)``; ``pid_of`` and ``exit_code_of`` the same way.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.k8s_version import KUBERNETES_VERSION
from harness.kafka_dist import HarnessError
from harness.kube_rest import ApiError, KubeRest
from harness.pod_container import engine_for
from harness.pod_images import ImageCommand, default_images
from harness.pod_worker import ContainerRecord, PodWorker, now, pod_is_terminal

if TYPE_CHECKING:
    from harness.control_plane import ControlPlane

NODE_CAPACITY = {"cpu": "8", "memory": "16Gi", "pods": "110", "ephemeral-storage": "100Gi"}


@dataclass
class ProcessKubelet:
    workdir: Path
    api: ControlPlane
    nodes: int = 1
    images: dict[str, ImageCommand] = field(default_factory=default_images)
    errors: list[str] = field(default_factory=list, init=False)
    engines_used: set[str] = field(default_factory=set, init=False)  # container mode's podman or docker
    node_names: list[str] = field(default_factory=list, init=False)
    _workers: dict[str, PodWorker] = field(default_factory=dict, init=False)
    _bound: set[str] = field(default_factory=set, init=False)
    _runs: dict[tuple[str, str, str], list[tuple[Path, ContainerRecord]]] = field(
        default_factory=dict, init=False
    )
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _stopping: threading.Event = field(default_factory=threading.Event, init=False)
    _watcher: threading.Thread | None = field(default=None, init=False)
    _next_node: int = field(default=0, init=False)

    def rest(self) -> KubeRest:
        return self.api.rest()

    def start(self) -> ProcessKubelet:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.node_names = [f"harness-node-{index}" for index in range(self.nodes)]
        rest = self.rest()
        for name in self.node_names:
            self._register(rest, name)
        self._watcher = threading.Thread(target=self._watch_pods, name="process-kubelet", daemon=True)
        self._watcher.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            workers = list(self._workers.values())
        for worker in workers:
            worker.kill_now()
        for worker in workers:
            worker.join(timeout=30)
        for engine in self.engines_used:  # containers a killed `podman run` left behind
            engine_for(engine).remove_labelled(str(self.workdir))

    def service_env(self) -> dict[str, str]:
        """A pod's variables for the ``kubernetes`` Service: here, the API server's own address."""
        port = str(self.api.port)
        return {
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": port,
            "KUBERNETES_SERVICE_PORT_HTTPS": port,
            "KUBERNETES_PORT": f"tcp://127.0.0.1:{port}",
            "KUBERNETES_PORT_443_TCP": f"tcp://127.0.0.1:{port}",
            "KUBERNETES_PORT_443_TCP_ADDR": "127.0.0.1",
            "KUBERNETES_PORT_443_TCP_PORT": port,
            "KUBERNETES_PORT_443_TCP_PROTO": "tcp",
        }

    # -- nodes -------------------------------------------------------------------------------------------

    def _register(self, rest: KubeRest, name: str) -> None:
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
        try:
            rest.call(
                "POST",
                "/api/v1/nodes",
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}},
            )
        except ApiError as exc:
            if exc.code != 409:
                raise
        stamp = now()
        conditions = [
            {
                "type": kind,
                "status": "False",
                "reason": f"Kubelet Has No {kind}",
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": stamp,
            }
            for kind in ("MemoryPressure", "DiskPressure", "PIDPressure")
        ]
        conditions.append(
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "process kubelet is posting ready status",
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": stamp,
            }
        )
        status = {
            "capacity": NODE_CAPACITY,
            "allocatable": NODE_CAPACITY,
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "kubeletVersion": KUBERNETES_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "containerRuntimeVersion": "harness-process://1",
                "osImage": "process kubelet (tierkeeper test harness)",
                "kernelVersion": "",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        }
        rest.merge_patch(f"/api/v1/nodes/{name}/status", {"status": status})
        # TaintNodesByCondition tainted the new node not-ready; with no node lifecycle controller to lift
        # it, the kubelet does (the node is ready from the start).
        rest.merge_patch(f"/api/v1/nodes/{name}", {"spec": {"taints": None}})

    # -- the pod watch -----------------------------------------------------------------------------------

    def _watch_pods(self) -> None:
        rest = self.rest()
        while not self._stopping.is_set():
            try:
                listing = rest.get("/api/v1/pods")
                for pod in listing["items"]:
                    self._handle("ADDED", pod)
                version = listing["metadata"]["resourceVersion"]
                for event_type, pod in self._events(rest, version):
                    self._handle(event_type, pod)
            except Exception as exc:  # noqa: BLE001 - the watch must survive any hiccup; relist after it
                if self._stopping.is_set():
                    return
                self.errors.append(f"pod watch: {exc!r}")
                self._stopping.wait(0.5)

    def _events(self, rest: KubeRest, version: str) -> Iterator[tuple[str, dict[str, Any]]]:
        while not self._stopping.is_set():
            for event in rest.watch("/api/v1/pods", version, timeout_seconds=20):
                obj = event["object"]
                if event["type"] == "ERROR":
                    return  # e.g. 410 Gone: the caller relists
                version = obj["metadata"]["resourceVersion"]
                if event["type"] != "BOOKMARK":
                    yield event["type"], obj
                if self._stopping.is_set():
                    return

    def _handle(self, event_type: str, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        uid = meta["uid"]
        if event_type == "DELETED":
            with self._lock:
                worker = self._workers.pop(uid, None)
            if worker is not None:
                worker.forgotten = True
                worker.request_stop(0)
            return
        node = spec.get("nodeName")
        if not node:
            if (
                spec.get("schedulerName", "default-scheduler") == "default-scheduler"
                and "deletionTimestamp" not in meta
            ):
                self._bind(pod)
            return
        if node not in self.node_names:
            return
        with self._lock:
            worker = self._workers.get(uid)
            if worker is None and "deletionTimestamp" not in meta and not pod_is_terminal(pod):
                worker = self._workers[uid] = PodWorker(self, pod)
                worker.start()
                return
        if "deletionTimestamp" in meta:
            grace = meta.get("deletionGracePeriodSeconds")
            if worker is not None and worker.is_alive():
                worker.request_stop(None if grace is None else float(grace))
            elif worker is None or not worker.stopping.is_set():
                self.delete_now(pod)  # nothing runs (any more): the kubelet's part is done

    def _bind(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        if meta["uid"] in self._bound:
            return
        wanted = pod["spec"].get("nodeSelector", {}).get("kubernetes.io/hostname")
        if wanted is not None and wanted not in self.node_names:
            return  # another node's pod: stays Pending, as with a real scheduler
        if wanted is None:
            wanted = self.node_names[self._next_node % len(self.node_names)]
            self._next_node += 1
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": wanted},
        }
        try:
            self.rest().call(
                "POST", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding", body
            )
            self._bound.add(meta["uid"])
        except ApiError as exc:
            if exc.code not in (404, 409):
                self.errors.append(f"binding {meta['namespace']}/{meta['name']}: {exc}")

    def delete_now(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": meta["uid"]},
        }
        try:
            self.rest().call("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", body)
        except ApiError as exc:
            if exc.code not in (404, 409):
                self.errors.append(f"deleting {meta['namespace']}/{meta['name']}: {exc}")

    # -- pod files and logs ------------------------------------------------------------------------------

    def pod_directory(self, namespace: str, name: str, uid: str) -> Path:
        return self.workdir / "pods" / f"{namespace}_{name}_{uid}"

    def note_run(self, meta: dict[str, Any], record: ContainerRecord, log: Path) -> None:
        with self._lock:
            self._runs.setdefault((meta["namespace"], meta["name"], record.name), []).append((log, record))

    def _run(self, namespace: str, pod: str, container: str, previous: bool) -> tuple[Path, ContainerRecord]:
        with self._lock:
            runs = list(self._runs.get((namespace, pod, container), []))
        index = -2 if previous else -1
        if len(runs) < -index:
            kind = "previous run" if previous else "run"
            raise HarnessError(f"no {kind} of container {container} of pod {namespace}/{pod} on this kubelet")
        return runs[index]

    def logs(self, namespace: str, pod: str, container: str, *, previous: bool = False) -> str:
        """stdout and stderr of the container's current run (``previous``: the run before it)."""
        return self._run(namespace, pod, container, previous)[0].read_text(errors="replace")

    def pid_of(self, namespace: str, pod: str, container: str) -> int:
        """Process id of the container's current run (the process group leader)."""
        proc = self._run(namespace, pod, container, False)[1].proc
        if proc is None:
            raise HarnessError(f"container {container} of pod {namespace}/{pod} has not started")
        return proc.pid

    def exit_code_of(self, namespace: str, pod: str, container: str) -> int | None:
        """Exit code of the container's current run, None while it runs."""
        state = self._run(namespace, pod, container, False)[1].state
        return state["terminated"]["exitCode"] if "terminated" in state else None
