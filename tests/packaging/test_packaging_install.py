"""The images `make images` built (Dockerfile: docker/install-venv.sh's steps, constraints.txt) hold
exactly the pinned distributions and run both entry points: each check runs in a container of the image
itself, as the kubelet would start it (podman through runc, or docker where a Docker engine built them).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass

import pytest
from packaging.utils import canonicalize_name

from harness.paths import REPO_ROOT
from harness.pod_container import ContainerEngine, engine_for

pytestmark = pytest.mark.slow

CONSTRAINTS = REPO_ROOT / "constraints.txt"
VENV = "/opt/tierkeeper"
"""Where the Dockerfile's venv lives (install-venv.sh's VENV in every stage)."""


@dataclass(frozen=True)
class Installed:
    target: str
    image: str
    engine: ContainerEngine

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        # The image's own environment, user and working directory; nothing of the host's but the network.
        command = [*self.engine.base(), "--rm", "--network", "host"]
        command += ["--entrypoint", json.dumps(argv[:1]), self.image, *argv[1:]]
        return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def installed(built_images: tuple[str, dict[str, str]]) -> dict[str, Installed]:
    engine, images = built_images
    tool = engine_for("docker" if engine == "docker" else "podman")
    return {
        target: Installed(target, images[f"tierkeeper/{target}"], tool) for target in ("operator", "pipeline")
    }


@pytest.mark.parametrize("target", ["operator", "pipeline"])
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("tierkeeper", "--help"), "copy"),
        (("tierkeeper", "operator", "--help"), "--all-namespaces"),
        (("python", "-m", "tierkeeper_operator", "--help"), "--all-namespaces"),
        (("tierkeeper", "copy", "--help"), "--log-dir"),
    ],
)
def test_entry_points_run(
    installed: dict[str, Installed], target: str, argv: tuple[str, ...], expected: str
) -> None:
    proc = installed[target].run(*argv)
    assert proc.returncode == 0, proc.stderr
    assert expected in proc.stdout
    assert "unavailable" not in proc.stderr  # a plugin verb that failed to load is only a warning


def installed_versions(env: Installed) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json; "
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    )
    proc = env.run("python", "-c", code)
    assert proc.returncode == 0, proc.stderr
    return {canonicalize_name(k): v for k, v in json.loads(proc.stdout).items()}


def constraint_pins() -> dict[str, str]:
    out = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[canonicalize_name(name)] = version
    return out


def test_pipeline_holds_exactly_the_pinned_distributions(installed: dict[str, Installed]) -> None:
    versions = installed_versions(installed["pipeline"])
    assert versions.pop("tierkeeper") == "0.1.0"
    assert versions == constraint_pins()


def test_operator_holds_the_pins_without_spark(installed: dict[str, Installed]) -> None:
    versions = installed_versions(installed["operator"])
    versions.pop("tierkeeper")
    expected = {k: v for k, v in constraint_pins().items() if k not in ("pyspark", "py4j")}
    assert versions == expected
    proc = installed["operator"].run("python", "-c", "import pyspark")
    assert proc.returncode != 0 and "No module named 'pyspark'" in proc.stderr


def test_environments_carry_no_installer(installed: dict[str, Installed]) -> None:
    for env in installed.values():
        proc = env.run(
            "python", "-c", "import pathlib, sys; print(sorted(pathlib.Path(sys.prefix, 'bin').iterdir()))"
        )
        assert proc.returncode == 0, proc.stderr
        assert f"{VENV}/bin/tierkeeper" in proc.stdout and "/pip" not in proc.stdout, proc.stdout
