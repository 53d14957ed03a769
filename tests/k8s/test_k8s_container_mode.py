"""The kubelet's container mode: a pod of our image runs as a real container of the image `make images`
built, with the pod's identity, security context, environment and volumes as a kubelet gives them."""

from __future__ import annotations

import json
import textwrap
from typing import Any

from k8s_helpers import create, finished_pod, pod_manifest

from harness.control_plane import ControlPlane
from harness.pod_container import ContainerEngine, run_command

# What the container reports about itself: identity, capabilities, what it can write, what it was given.
PROBE = textwrap.dedent(
    """
    import json, os, pathlib, socket
    def writable(path):
        try:
            pathlib.Path(path, ".probe").write_text("x")
            return True
        except OSError:
            return False
    lines = open("/proc/self/status").read().splitlines()
    status = dict(line.split(":\\t", 1) for line in lines if ":\\t" in line)
    token = pathlib.Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
    print(json.dumps({
        "uid": os.getuid(), "gid": os.getgid(), "groups": sorted(os.getgroups()),
        "cap_eff": int(status["CapEff"], 16), "no_new_privs": status["NoNewPrivs"].strip(),
        "root": writable("/"), "opt": writable("/opt/tierkeeper"), "tmp": writable("/tmp"),
        "secret": pathlib.Path("/etc/creds/password").read_text(),
        "secret_writable": writable("/etc/creds"),
        "env": os.environ.get("FROM_SECRET"), "home": os.environ.get("HOME"),
        "token": token.is_file() and token.read_text().count(".") == 2,
        "java": os.path.exists("/opt/java/openjdk/bin/java"),
        "hostname": os.uname().nodename,
        "resolves": socket.gethostbyname(os.uname().nodename),
    }))
    """
)


def test_the_run_command_carries_the_security_context() -> None:
    mounts = [{"source": "/host/a", "target": "/a", "read_only": True}]
    security = {
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
    }
    command = run_command(
        ContainerEngine("podman"),
        name="n",
        label="l",
        image="localhost/tierkeeper/pipeline:inputs-x",
        argv=["tierkeeper", "copy", "--help"],
        env={"A": "1\n2"},
        working_dir="/tmp",
        mounts=mounts,
        uid=10001,
        gid=10001,
        groups=[2000],
        hostname="pod",
        security=security,
    )
    text = " ".join(command)
    # podman's --read-only alone would add writable tmpfs mounts a kubelet does not.
    assert "--read-only --read-only-tmpfs=false" in text
    assert "--user 10001:10001 --group-add 2000" in text
    assert "--cap-drop ALL --cap-add NET_BIND_SERVICE" in text
    assert "--security-opt no-new-privileges" in text
    assert "--mount type=bind,source=/host/a,destination=/a,readonly" in text
    assert "--runtime runc" in text and "--network host" in text and "--pull never" in text
    assert command[command.index("--env") + 1] == "A=1\n2"
    assert command[-4:] == ['["tierkeeper"]', "localhost/tierkeeper/pipeline:inputs-x", "copy", "--help"]


def test_a_pipeline_pod_runs_as_the_image_with_the_pods_security_context_env_and_volumes(
    k8s_control_plane: ControlPlane, k8s_namespace: str, container_mode: str
) -> None:
    plane, ns = k8s_control_plane, k8s_namespace
    create(
        plane,
        f"/api/v1/namespaces/{ns}/secrets",
        {"metadata": {"name": "creds"}, "stringData": {"password": "p"}},
    )
    container: dict[str, Any] = {
        "name": "probe",
        "image": "tierkeeper/pipeline:0.1.0",
        "command": ["/opt/tierkeeper/bin/python", "-c", PROBE],
        "env": [{"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}}],
        "securityContext": {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "creds", "mountPath": "/etc/creds"},
        ],
    }
    pod = pod_manifest(
        "probe",
        [container],
        securityContext={"fsGroup": 2000, "seccompProfile": {"type": "RuntimeDefault"}},
        volumes=[{"name": "tmp", "emptyDir": {}}, {"name": "creds", "secret": {"secretName": "creds"}}],
    )
    create(plane, f"/api/v1/namespaces/{ns}/pods", pod)
    done = finished_pod(plane, ns, "probe")
    log = plane.kubelet.logs(ns, "probe", "probe")
    assert done["status"]["phase"] == "Succeeded", (done["status"], log)
    (status,) = done["status"]["containerStatuses"]
    assert status["containerID"].startswith(f"{container_mode}://"), status
    seen = json.loads(log.strip().splitlines()[-1])
    assert seen == {
        "uid": 10001,  # the image's USER: the pod sets no runAsUser
        "gid": 10001,
        "groups": [2000, 10001],
        "cap_eff": 0,
        "no_new_privs": "1",
        "root": False,
        "opt": False,
        "tmp": True,
        "secret": "p",
        "secret_writable": False,
        "env": "p",
        "home": "/tmp",
        "token": True,
        "java": True,
        "hostname": "probe",
        "resolves": "127.0.0.1",  # as in a kubelet's pod, whose /etc/hosts names it (Spark needs that)
    }, log
