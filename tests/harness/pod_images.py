"""The process kubelet's image table: which local command stands in for a container image.

A container runs ``command or entrypoint`` followed by ``args or cmd`` (Docker's ENTRYPOINT/CMD rules),
with the image's environment under the container's. The tag is ignored: whatever tag the pod names,
the code that runs is the checkout's own. An image missing from the table fails the pod with reason
``ErrImagePull`` and a message naming the known images (under restartPolicy Always the pod stays
Pending with that container state instead, as a kubelet keeps retrying the pull); it never runs
something else.

Tests add images with ``plane.kubelet.images["name"] = ImageCommand(...)``. :func:`container_images`
gives the entries that run our repositories from the images ``make images`` built, as real containers
(the ``container_mode`` fixture of tests/conftest.py swaps them in for one test).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness.kafka_dist import HarnessError
from harness.paths import REPO_ROOT


@dataclass(frozen=True)
class ImageCommand:
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    working_dir: str = "/"
    user: int | None = None  # the image's USER (None: root), used when the pod sets no runAsUser
    group: int | None = None
    # Host paths the image's files live under; a non-root container user must be able to reach them.
    needs: tuple[str, ...] = ()
    # Accounts the image adds to /etc/passwd and /etc/group (uid -> name; the group has the same id).
    accounts: dict[int, str] = field(default_factory=dict)
    # Container mode (harness.pod_container): the built image to run, and the tool that runs it. The
    # image's own files, accounts and environment apply; the fields above only mirror its Dockerfile.
    container: str | None = None
    engine: str = "podman"


def repository_of(image: str) -> str:
    """``docker.io/library/python:3.11@sha256:..`` -> ``python``; ``reg:5000/a/b:1`` -> ``reg:5000/a/b``."""
    name = image.split("@", 1)[0]
    last_slash = name.rfind("/")
    if ":" in name[last_slash + 1 :]:
        name = name[: name.rfind(":")]
    for prefix in ("docker.io/library/", "docker.io/", "library/"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    return name


def default_images() -> dict[str, ImageCommand]:
    """Our own images, run from the interpreter's environment (the project's venv under pytest)."""
    bin_dir = Path(sys.executable).parent
    needs = (sys.base_prefix, sys.prefix, str(REPO_ROOT))
    path = f"{bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    # As the Dockerfile: ENTRYPOINT ["tierkeeper"], CMD ["--help"], USER 10001:10001 (an account named
    # tierkeeper), WORKDIR /tmp.
    tierkeeper_env = {"PATH": path, "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/tmp"}
    tierkeeper = ImageCommand(
        entrypoint=(str(bin_dir / "tierkeeper"),),
        cmd=("--help",),
        env=tierkeeper_env,
        working_dir="/tmp",
        user=10001,
        group=10001,
        needs=needs,
        accounts={10001: "tierkeeper"},
    )
    return {
        "tierkeeper": tierkeeper,
        # The Dockerfile's two targets (make images): the same ENTRYPOINT, USER and WORKDIR.
        "tierkeeper/operator": tierkeeper,
        "tierkeeper/pipeline": tierkeeper,
        # The operator's own entry point, for pods that do not go through the console script.
        "tierkeeper-operator": replace(
            tierkeeper, entrypoint=(sys.executable, "-m", "tierkeeper_operator"), cmd=()
        ),
        # A Python image with the project installed, for test pods that script something (python:3.11 runs
        # as root with CMD ["python3"]).
        "python": ImageCommand(
            cmd=("python3",), env={"PATH": path, "HOME": "/root", "PYTHONUNBUFFERED": "1"}, needs=needs
        ),
    }


def built_images() -> tuple[str, dict[str, str]]:
    """(engine, {repository: image}) of the images for the checkout as it is, built first where missing
    (docker/build_images.py: a lookup when `make images` ran for these inputs, a build otherwise)."""
    script = REPO_ROOT / "docker" / "build_images.py"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise HarnessError(f"building the images failed ({script}):\n{done.stderr[-4000:]}")
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return str(answer["engine"]), dict(answer["images"])


def container_images(engine: str, built: dict[str, str]) -> dict[str, ImageCommand]:
    """Our repositories run from their built images (Dockerfile: ENTRYPOINT ["tierkeeper"], USER
    10001:10001, WORKDIR /tmp; the operator target's CMD is ["operator", "--help"])."""
    tool = "docker" if engine == "docker" else "podman"
    entries = {}
    for repository, image in built.items():
        cmd = ("operator", "--help") if repository.endswith("/operator") else ("--help",)
        entries[repository] = ImageCommand(
            entrypoint=("tierkeeper",),
            cmd=cmd,
            working_dir="/tmp",
            user=10001,
            group=10001,
            container=image,
            engine=tool,
        )
    return entries
