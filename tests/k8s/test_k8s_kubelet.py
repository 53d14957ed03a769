"""The process kubelet runs pods as a kubelet would, against the real API server: Jobs complete through
the Job controller, env and volumes resolve, readOnly mounts refuse writes, deletion stops processes."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

from k8s_helpers import (
    create,
    finished_pod,
    get_pod,
    pod_manifest,
    service_account_with_role,
    terminated,
    unique,
    wait_for,
)

from harness.control_plane import ControlPlane
from harness.kube_rest import ApiError


def python_container(name: str, script: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": "python:3.11",
        "command": ["python3", "-c", textwrap.dedent(script)],
        **extra,
    }


def job_condition(plane: ControlPlane, namespace: str, name: str) -> str | None:
    job = plane.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}")
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition["type"] in ("Complete", "Failed") and condition["status"] == "True":
            return str(condition["type"])
    return None


def job_pods(plane: ControlPlane, namespace: str, job: str) -> list[dict[str, Any]]:
    pods = plane.request("GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector=job-name%3D{job}")
    return list(pods["items"])


def manual_volume(
    name: str, path: Path, claim_namespace: str, claim_name: str, **spec: Any
) -> dict[str, Any]:
    """A 1Gi host-path PersistentVolume of storage class manual, reserved for one claim."""
    volume = {
        "capacity": {"storage": "1Gi"},
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "manual",
        "hostPath": {"path": str(path)},
        "claimRef": {"namespace": claim_namespace, "name": claim_name},
        **spec,
    }
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": volume}


# What a claim asks for, so that it binds to a manual_volume.
MANUAL_CLAIM_SPEC: dict[str, Any] = {
    "accessModes": ["ReadWriteOnce"],
    "storageClassName": "manual",
    "resources": {"requests": {"storage": "1Gi"}},
}


def tierkeeper_job(name: str, args: list[str], tier: Path) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "tierkeeper",
                            "image": "tierkeeper:0.1.0",
                            "args": args,
                            "volumeMounts": [{"name": "tier", "mountPath": "/data"}],
                        }
                    ],
                    "volumes": [{"name": "tier", "hostPath": {"path": str(tier), "type": "Directory"}}],
                }
            },
        },
    }


def test_a_job_completes_after_its_pod_ran_tierkeeper(
    k8s_control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    tier = tmp_path / "tier"
    tier.mkdir()
    create(
        plane,
        f"/apis/batch/v1/namespaces/{ns}/jobs",
        tierkeeper_job("list", ["ls", "--remote", "file:///data", "--json"], tier),
    )
    assert wait_for(lambda: job_condition(plane, ns, "list"), "job list to finish") == "Complete"
    (pod,) = job_pods(plane, ns, "list")
    assert terminated(pod, "tierkeeper")["exitCode"] == 0
    listing = json.loads(plane.kubelet.logs(ns, pod["metadata"]["name"], "tierkeeper"))
    assert listing["segments"] == []  # the command really ran: its --json listing of the empty tier


def test_a_job_whose_command_fails_is_failed_with_the_exit_code_and_the_error(
    k8s_control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    create(
        plane,
        f"/apis/batch/v1/namespaces/{ns}/jobs",
        tierkeeper_job("bad", ["ls", "--remote", "nosuchscheme://bucket/x"], tmp_path),
    )
    assert wait_for(lambda: job_condition(plane, ns, "bad"), "job bad to finish") == "Failed"
    (pod,) = job_pods(plane, ns, "bad")
    assert pod["status"]["phase"] == "Failed"
    assert terminated(pod, "tierkeeper")["exitCode"] != 0
    log = plane.kubelet.logs(ns, pod["metadata"]["name"], "tierkeeper")
    assert "nosuchscheme" in log, log


def test_env_args_working_dir_exit_code_and_termination_message(
    k8s_control_plane: ControlPlane, k8s_namespace: str
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    create(
        plane,
        f"/api/v1/namespaces/{ns}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "creds"},
            "stringData": {"key": "s3cr3t"},
        },
    )
    create(
        plane,
        f"/api/v1/namespaces/{ns}/configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "settings"},
            "data": {"mode": "fast", "LEVEL": "debug"},
        },
    )
    script = """
        import json, os, sys
        keys = ["SECRET", "MODE", "POD", "NS", "CFG_LEVEL", "GREETING", "KUBERNETES_SERVICE_HOST"]
        env = {k: os.environ.get(k) for k in keys}
        print(json.dumps({"env": env, "cwd": os.getcwd(), "argv": sys.argv[1:]}))
        with open("/dev/termination-log", "w") as f:
            f.write("finished on purpose")
        sys.exit(7)
    """
    container = python_container(
        "main",
        script,
        args=["$(MODE)", "literal"],
        workingDir="/tmp",
        envFrom=[{"prefix": "CFG_", "configMapRef": {"name": "settings"}}],
        env=[
            {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "key"}}},
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "GREETING", "value": "mode is $(MODE)"},
        ],
    )
    create(plane, f"/api/v1/namespaces/{ns}/pods", pod_manifest("env", [container]))
    pod = finished_pod(plane, ns, "env")
    assert pod["status"]["phase"] == "Failed"
    state = terminated(pod, "main")
    assert state["exitCode"] == 7 and state["reason"] == "Error"
    assert state["message"] == "finished on purpose"
    seen = json.loads(plane.kubelet.logs(ns, "env", "main"))
    assert seen == {
        "env": {
            "SECRET": "s3cr3t",
            "MODE": "fast",
            "POD": "env",
            "NS": ns,
            "CFG_LEVEL": "debug",
            "GREETING": "mode is fast",
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        },
        "cwd": "/tmp",
        "argv": ["fast", "literal"],
    }


def test_init_containers_run_first_and_share_an_empty_dir(
    k8s_control_plane: ControlPlane, k8s_namespace: str
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    init = python_container(
        "init",
        "open('/scratch/from-init', 'w').write('init ran')",
        volumeMounts=[{"name": "work", "mountPath": "/scratch"}],
    )
    main = python_container(
        "main",
        "print(open('/scratch/from-init').read())",
        volumeMounts=[{"name": "work", "mountPath": "/scratch"}],
    )
    create(
        plane,
        f"/api/v1/namespaces/{ns}/pods",
        pod_manifest("init", [main], initContainers=[init], volumes=[{"name": "work", "emptyDir": {}}]),
    )
    pod = finished_pod(plane, ns, "init")
    assert pod["status"]["phase"] == "Succeeded"
    assert pod["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert plane.kubelet.logs(ns, "init", "main").strip() == "init ran"


def test_a_read_only_volume_cannot_be_written(
    k8s_control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    shared = tmp_path / "shared"
    shared.mkdir()
    # The same host directory twice: writable at /rw, readOnly at /ro. The process runs as root, so only
    # the read-only mount (not file permissions) can stop it.
    script = """
        import errno, os
        open("/rw/written", "w").write("ok")
        try:
            open("/ro/refused", "w").write("must not happen")
        except OSError as exc:
            print("refused", errno.errorcode[exc.errno], os.getuid())
        else:
            print("written")
    """
    container = python_container(
        "main",
        script,
        volumeMounts=[
            {"name": "data", "mountPath": "/rw"},
            {"name": "data", "mountPath": "/ro", "readOnly": True},
        ],
    )
    volumes = [{"name": "data", "hostPath": {"path": str(shared), "type": "Directory"}}]
    create(plane, f"/api/v1/namespaces/{ns}/pods", pod_manifest("ro", [container], volumes=volumes))
    pod = finished_pod(plane, ns, "ro")
    assert pod["status"]["phase"] == "Succeeded", plane.kubelet.logs(ns, "ro", "main")
    assert plane.kubelet.logs(ns, "ro", "main").split() == ["refused", "EROFS", "0"]
    assert (shared / "written").read_text() == "ok"
    assert not (shared / "refused").exists()
    # The bind mounts lived in the container's mount namespace only.
    assert not Path("/ro/refused").exists() and not (Path("/rw") / "written").exists()


def test_a_persistent_volume_claim_is_a_static_host_path_volume(
    k8s_control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    disk = tmp_path / "disk"
    disk.mkdir()
    pv_name = unique("pv")
    create(
        plane,
        "/api/v1/persistentvolumes",
        manual_volume(pv_name, disk, ns, "data", persistentVolumeReclaimPolicy="Retain"),
    )
    create(
        plane,
        f"/api/v1/namespaces/{ns}/persistentvolumeclaims",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data"},
            "spec": MANUAL_CLAIM_SPEC,
        },
    )
    container = python_container(
        "main",
        "open('/var/lib/data/hello', 'w').write('from the pod')",
        volumeMounts=[{"name": "data", "mountPath": "/var/lib/data"}],
    )
    volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    create(plane, f"/api/v1/namespaces/{ns}/pods", pod_manifest("pvc", [container], volumes=volumes))
    pod = finished_pod(plane, ns, "pvc")
    assert pod["status"]["phase"] == "Succeeded", plane.kubelet.logs(ns, "pvc", "main")
    assert (disk / "hello").read_text() == "from the pod"
    plane.request("DELETE", f"/api/v1/persistentvolumes/{pv_name}")


def test_an_unknown_image_fails_the_pod_with_the_reason(
    k8s_control_plane: ControlPlane, k8s_namespace: str
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    create(
        plane,
        f"/api/v1/namespaces/{ns}/pods",
        pod_manifest("unknown", [{"name": "main", "image": "registry.example/nothing:1"}]),
    )
    pod = finished_pod(plane, ns, "unknown")
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["reason"] == "ErrImagePull"
    waiting = pod["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] == "ErrImagePull"
    assert (
        "registry.example/nothing:1" in waiting["message"]
        and "not in the process kubelet's image table" in waiting["message"]
    )
    # Under restartPolicy Always (a Deployment's pod) the pod stays Pending, never running anything.
    create(
        plane,
        f"/api/v1/namespaces/{ns}/pods",
        pod_manifest("unknown-always", [{"name": "main", "image": "nothing"}], restartPolicy="Always"),
    )

    def waiting_reason() -> str | None:
        pod = get_pod(plane, ns, "unknown-always") or {}
        statuses = pod.get("status", {}).get("containerStatuses") or [{}]
        reason: str | None = statuses[0].get("state", {}).get("waiting", {}).get("reason")
        return reason

    assert wait_for(waiting_reason, "unknown-always to report its image") == "ErrImagePull"
    assert (get_pod(plane, ns, "unknown-always") or {})["status"]["phase"] == "Pending"
    plane.request("DELETE", f"/api/v1/namespaces/{ns}/pods/unknown-always")
    wait_for(lambda: get_pod(plane, ns, "unknown-always") is None, "unknown-always to be removed")


def test_deleting_a_pod_stops_its_process_sigterm_then_sigkill(
    k8s_control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    marks = tmp_path / "marks"
    marks.mkdir()
    # "polite" exits 0 from its SIGTERM handler (a long grace period: its handler must get to run, however
    # busy the machine); "stubborn" ignores SIGTERM and is SIGKILLed when its short grace period ends.
    polite = """
        import signal, sys, time
        def stop(*_):
            open("/marks/polite-sigterm", "w").write("ok"); sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
        open("/marks/polite-started", "w").write("ok")
        while True: time.sleep(1)
    """
    stubborn = """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open("/marks/stubborn-started", "w").write("ok")
        while True: time.sleep(1)
    """
    volumes = [{"name": "marks", "hostPath": {"path": str(marks), "type": "Directory"}}]
    mounts = [{"name": "marks", "mountPath": "/marks"}]
    for name, script, grace in (("polite", polite, 120), ("stubborn", stubborn, 1)):
        create(
            plane,
            f"/api/v1/namespaces/{ns}/pods",
            pod_manifest(
                name,
                [python_container("main", script, volumeMounts=mounts)],
                volumes=volumes,
                terminationGracePeriodSeconds=grace,
            ),
        )
    for name in ("polite", "stubborn"):
        wait_for(lambda name=name: (marks / f"{name}-started").exists(), f"{name} to start")
        running = wait_for(
            lambda name=name: (get_pod(plane, ns, name) or {}).get("status", {}).get("phase") == "Running",
            f"{name} to be Running",
        )
        assert running
    processes = {name: plane.kubelet.pid_of(ns, name, "main") for name in ("polite", "stubborn")}
    for name in ("polite", "stubborn"):
        plane.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}")
    for name in ("polite", "stubborn"):
        wait_for(lambda name=name: get_pod(plane, ns, name) is None, f"pod {name} to be removed")
    assert (marks / "polite-sigterm").exists()
    for name, pid in processes.items():
        assert not Path(f"/proc/{pid}").exists(), f"{name}'s process {pid} survived its pod"
    assert plane.kubelet.exit_code_of(ns, "polite", "main") == 0
    assert plane.kubelet.exit_code_of(ns, "stubborn", "main") == 128 + 9  # SIGKILL


def test_pods_get_a_service_account_token_that_works_in_cluster_and_rbac_limits_it(
    k8s_control_plane: ControlPlane, k8s_namespace: str
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    service_account_with_role(
        plane,
        ns,
        "reader",
        "configmap-reader",
        [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
    )
    # The official client's in-cluster config: token, ca.crt and namespace from the projected volume,
    # the address from KUBERNETES_SERVICE_HOST/PORT.
    script = """
        import json, kubernetes
        kubernetes.config.load_incluster_config()
        api = kubernetes.client.CoreV1Api()
        ns = open("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read()
        result = {"configmaps": sorted(c.metadata.name for c in api.list_namespaced_config_map(ns).items)}
        try:
            api.list_namespaced_secret(ns)
            result["secrets"] = "allowed"
        except kubernetes.client.ApiException as exc:
            result["secrets"] = exc.status
        print(json.dumps(result))
    """
    create(
        plane,
        f"/api/v1/namespaces/{ns}/pods",
        pod_manifest("sa", [python_container("main", script)], serviceAccountName="reader"),
    )
    pod = finished_pod(plane, ns, "sa")
    log = plane.kubelet.logs(ns, "sa", "main")
    assert pod["status"]["phase"] == "Succeeded", log
    assert json.loads(log.strip().splitlines()[-1]) == {"configmaps": ["kube-root-ca.crt"], "secrets": 403}


def test_the_tierkeeper_image_runs_as_its_non_root_user(
    k8s_control_plane: ControlPlane, k8s_namespace: str
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    container = {
        "name": "main",
        "image": "tierkeeper",
        "command": [sys.executable, "-c", "import os; print(os.getuid(), os.getgid())"],
    }
    create(plane, f"/api/v1/namespaces/{ns}/pods", pod_manifest("user", [container]))
    pod = finished_pod(plane, ns, "user")
    assert pod["status"]["phase"] == "Succeeded", plane.kubelet.logs(ns, "user", "main")
    assert plane.kubelet.logs(ns, "user", "main").split() == ["10001", "10001"]


def test_read_only_root_filesystem_leaves_only_the_volumes_writable(
    k8s_control_plane: ControlPlane, k8s_namespace: str
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    script = """
        import errno
        def attempt(path):
            try:
                with open(path, "w") as f:
                    f.write("x")
                return "written"
            except OSError as exc:
                return errno.errorcode[exc.errno]
        print(attempt("/scratch/ok"), attempt("/var/tmp/tk-ro-root-probe"))
    """
    container = python_container(
        "main",
        script,
        securityContext={"readOnlyRootFilesystem": True},
        volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}],
    )
    volumes = [{"name": "scratch", "emptyDir": {}}]
    create(plane, f"/api/v1/namespaces/{ns}/pods", pod_manifest("roroot", [container], volumes=volumes))
    pod = finished_pod(plane, ns, "roroot")
    log = plane.kubelet.logs(ns, "roroot", "main")
    assert pod["status"]["phase"] == "Succeeded", log
    assert log.split() == ["written", "EROFS"]
    assert not Path("/var/tmp/tk-ro-root-probe").exists()


def test_a_finished_job_is_removed_by_ttl_after_finished_and_its_pod_by_the_garbage_collector(
    k8s_control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    job = tierkeeper_job("short-lived", ["ls", "--remote", "file:///data"], tmp_path)
    job["spec"]["ttlSecondsAfterFinished"] = 0
    created = create(plane, f"/apis/batch/v1/namespaces/{ns}/jobs", job)

    def job_gone() -> bool:
        try:
            current = plane.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/short-lived")
        except ApiError as exc:
            return exc.code == 404
        return bool(current["metadata"]["uid"] != created["metadata"]["uid"])

    wait_for(job_gone, "the ttl-after-finished controller to delete the finished Job")
    wait_for(lambda: not job_pods(plane, ns, "short-lived"), "the garbage collector to delete the Job's pod")


def test_restart_on_failure_counts_restarts_and_keeps_the_previous_log(
    k8s_control_plane: ControlPlane, k8s_namespace: str
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    script = """
        import os, sys
        if not os.path.exists("/state/failed-once"):
            open("/state/failed-once", "w").close()
            print("first run fails")
            sys.exit(1)
        print("second run succeeds")
    """
    container = python_container("main", script, volumeMounts=[{"name": "state", "mountPath": "/state"}])
    create(
        plane,
        f"/api/v1/namespaces/{ns}/pods",
        pod_manifest(
            "retry", [container], restartPolicy="OnFailure", volumes=[{"name": "state", "emptyDir": {}}]
        ),
    )
    pod = finished_pod(plane, ns, "retry")
    assert pod["status"]["phase"] == "Succeeded"
    (status,) = pod["status"]["containerStatuses"]
    assert status["restartCount"] == 1
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert plane.kubelet.logs(ns, "retry", "main", previous=True).strip() == "first run fails"
    assert plane.kubelet.logs(ns, "retry", "main").strip() == "second run succeeds"


def test_a_stateful_set_pod_gets_its_claim_bound_to_a_static_volume(
    k8s_control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    disk = tmp_path / "broker-0"
    disk.mkdir()
    pv_name = unique("pv")
    # Reserved for the claim the StatefulSet controller will create for its pod 0.
    create(plane, "/api/v1/persistentvolumes", manual_volume(pv_name, disk, ns, "data-broker-0"))
    script = "import socket; open('/var/lib/data/owner', 'w').write(socket.gethostname())"
    create(
        plane,
        f"/apis/apps/v1/namespaces/{ns}/statefulsets",
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "broker"},
            "spec": {
                "replicas": 1,
                "serviceName": "broker",
                "selector": {"matchLabels": {"app": "broker"}},
                "template": {
                    "metadata": {"labels": {"app": "broker"}},
                    "spec": {
                        "containers": [
                            python_container(
                                "main",
                                script + "; import time; time.sleep(3600)",
                                volumeMounts=[{"name": "data", "mountPath": "/var/lib/data"}],
                            )
                        ]
                    },
                },
                "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": MANUAL_CLAIM_SPEC}],
            },
        },
    )
    owner = disk / "owner"
    wait_for(lambda: owner.exists() and owner.read_text(), "broker-0 to write to its volume")
    assert owner.read_text() == "broker-0"
    plane.request("DELETE", f"/apis/apps/v1/namespaces/{ns}/statefulsets/broker")
    wait_for(lambda: get_pod(plane, ns, "broker-0") is None, "broker-0 to be removed with its StatefulSet")
    plane.request("DELETE", f"/api/v1/persistentvolumes/{pv_name}")


def test_a_volume_over_the_checkout_does_not_hide_the_image(
    k8s_control_plane: ControlPlane, k8s_namespace: str
) -> None:
    """The process kubelet's "image" is the checkout and its venv; an emptyDir mounted over a directory that
    holds them (a Job's emptyDir on /tmp while the checkout lives under /tmp) must not hide them, as a real
    container's own root filesystem would not be hidden."""
    from harness.paths import REPO_ROOT

    plane, ns = k8s_control_plane, k8s_namespace
    parent = str(REPO_ROOT.parent)
    script = f"""
        import os
        open(os.path.join({parent!r}, "scratch"), "w").write("ok")
        print(open(os.path.join({str(REPO_ROOT)!r}, "pyproject.toml")).read().split()[0])
    """
    container = python_container("main", script, volumeMounts=[{"name": "cover", "mountPath": parent}])
    manifest = pod_manifest("covered", [container], volumes=[{"name": "cover", "emptyDir": {}}])
    create(plane, f"/api/v1/namespaces/{ns}/pods", manifest)
    pod = finished_pod(plane, ns, "covered")
    assert pod["status"]["phase"] == "Succeeded", plane.kubelet.logs(ns, "covered", "main")
    assert plane.kubelet.logs(ns, "covered", "main").split() == ["[build-system]"]
    assert not (REPO_ROOT.parent / "scratch").exists()  # the write went to the emptyDir, not the host
