"""The process kubelet's container mode: one container of a pod run from a built image (``make images``).

Where an image table entry names a local image (:attr:`harness.pod_images.ImageCommand.container`), the
pod worker starts the container with ``podman run`` (``docker run`` where the images were built by a
Docker engine) instead of the process launcher, from the same resolved pod spec: argv, environment,
volumes (host directories bind-mounted at their ``mountPath``, read-only where asked), the termination
log, and the security context as a runtime applies it (user, group and supplemental groups, a read-only
root filesystem with nothing else writable, dropped and added capabilities, no privilege escalation).

Every container shares the host's network (the pods find Kafka, moto and the API server on 127.0.0.1 as
in process mode). podman runs through runc: crun refuses this kind of machine's hybrid cgroup hierarchy,
and runc needs the open-files and process limits lowered explicitly there.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.kafka_dist import HarnessError

LABEL = "io.tierkeeper.harness.kubelet"
"""Every container the kubelet starts carries it, valued with the kubelet's work directory."""
START_FAILURE = 125
"""podman's and docker's exit code when the container could not be created or started."""


@dataclass(frozen=True)
class ContainerEngine:
    tool: str  # podman or docker

    def base(self) -> list[str]:
        if self.tool == "docker":
            return ["docker", "run"]
        return [
            "podman",
            "run",
            "--runtime",
            "runc",
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
            "--pull",
            "never",
            "--log-driver",
            "none",
        ]

    def remove(self, name: str) -> None:
        """The container gone, whatever became of the ``run`` that started it (a killed run leaves it)."""
        subprocess.run(self._rm_command(name), capture_output=True, check=False)

    def _rm_command(self, name: str) -> list[str]:
        if self.tool == "podman":
            return ["podman", "rm", "--force", "--time", "0", name]
        return ["docker", "rm", "--force", name]

    def remove_labelled(self, value: str) -> None:
        listing = subprocess.run(
            [self.tool, "ps", "--all", "--quiet", "--filter", f"label={LABEL}={value}"],
            capture_output=True,
            text=True,
            check=False,
        )
        for container in listing.stdout.split():
            subprocess.run(self._rm_command(container), capture_output=True, check=False)


def engine_for(tool: str) -> ContainerEngine:
    if shutil.which(tool) is None:
        raise HarnessError(f"container mode needs {tool} on PATH (docker/install-build-tools.sh installs it)")
    return ContainerEngine(tool)


def run_command(
    engine: ContainerEngine,
    *,
    name: str,
    label: str,
    image: str,
    argv: list[str],
    env: Mapping[str, str],
    working_dir: str,
    mounts: list[dict[str, Any]],
    uid: int | None,
    gid: int | None,
    groups: list[int],
    hostname: str,
    security: Mapping[str, Any],
) -> list[str]:
    """The ``run`` command for one container start; ``security`` is the container's securityContext."""
    command = [*engine.base(), "--rm", "--name", name, "--label", f"{LABEL}={label}", "--network", "host"]
    # A kubelet's pod resolves its own hostname (the pod's /etc/hosts, or the node's name with
    # hostNetwork); on the host network podman adds no entry for it, and Spark's driver cannot start
    # without one (UnknownHostException).
    command += ["--hostname", hostname, "--add-host", f"{hostname}:127.0.0.1", "--workdir", working_dir]
    if uid is not None:
        command += ["--user", f"{uid}:{gid if gid is not None else 0}"]
    for group in groups:
        command += ["--group-add", str(group)]
    if security.get("readOnlyRootFilesystem"):
        # As a kubelet: the volumes are the only writable places (podman would add tmpfs /tmp and /run).
        command += ["--read-only"] + (["--read-only-tmpfs=false"] if engine.tool == "podman" else [])
    capabilities = security.get("capabilities") or {}
    for capability in capabilities.get("drop", []):
        command += ["--cap-drop", str(capability)]
    for capability in capabilities.get("add", []):
        command += ["--cap-add", str(capability)]
    if security.get("allowPrivilegeEscalation") is False:
        command += ["--security-opt", "no-new-privileges"]
    for mount in mounts:
        spec = f"type=bind,source={mount['source']},destination={mount['target']}"
        command += ["--mount", spec + (",readonly" if mount["read_only"] else "")]
    for key, value in env.items():
        command += ["--env", f"{key}={value}"]
    command += ["--entrypoint", json.dumps(argv[:1]), image, *argv[1:]]
    return command
