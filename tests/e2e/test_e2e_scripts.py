"""The e2e scripts cannot run here (no container engine), so check what can be checked without one: they
parse, ShellCheck finds nothing, they are executable, every repository file they name exists, and the
manifests they apply are valid YAML of the kinds they should be."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from harness.paths import REPO_ROOT
from harness.shellcheck import shellcheck_path

E2E = REPO_ROOT / "e2e"
SCRIPTS = sorted([*E2E.glob("*.sh"), *(E2E / "k8s").glob("*.sh")])
RUNNABLE = [s for s in SCRIPTS if s.name != "lib.sh"]


def test_scripts_exist() -> None:
    names = {s.name for s in SCRIPTS}
    assert {"lib.sh", "up.sh", "test-tiering.sh", "test-rebuild.sh", "run.sh", "down.sh"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_bash_parses(script: Path) -> None:
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_shellcheck_is_clean() -> None:
    proc = subprocess.run(
        [str(shellcheck_path()), "-x", *[str(s.relative_to(REPO_ROOT)) for s in SCRIPTS]],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,  # the scripts' `# shellcheck source=` paths are relative to the repository
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("script", RUNNABLE, ids=lambda p: p.name)
def test_scripts_are_executable_and_strict(script: Path) -> None:
    assert script.stat().st_mode & 0o111, f"{script.name} must be executable"
    assert "set -euo pipefail" in script.read_text()


def test_named_repository_files_exist() -> None:
    text = "\n".join(s.read_text() for s in SCRIPTS)
    named = set(re.findall(r'"\$E2E_DIR/([\w./-]+)"', text))
    named |= {f"../../{p}" for p in re.findall(r'"\$E2E_ROOT/([\w./-]+)"', text)}
    assert "manifests/tiering.yaml" in named
    for path in named:
        assert (E2E / "k8s" / path).resolve().exists(), path


def test_manifests_are_the_expected_objects() -> None:
    manifests = E2E / "k8s" / "manifests"
    kinds = {
        f.name: [doc.get("kind") for doc in yaml.safe_load_all(f.read_text()) if doc]
        for f in manifests.glob("*.yaml")
    }
    assert kinds["tiering.yaml"] == ["TieredTopic", "TieredBroker", "TieredBroker", "TieredBroker"]
    assert "StatefulSet" in kinds["kafka.yaml"] and "Deployment" in kinds["minio.yaml"]
    kafka = next(
        d for d in yaml.safe_load_all((manifests / "kafka.yaml").read_text()) if d["kind"] == "StatefulSet"
    )
    assert kafka["spec"]["template"]["spec"]["containers"][0]["image"] == "apache/kafka:4.1.1"
    namespace = next(
        d for d in yaml.safe_load_all((manifests / "kafka.yaml").read_text()) if d["kind"] == "Namespace"
    )
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_kafka_version_matches_the_harness() -> None:
    pom = (E2E / "kafka" / "pom.xml").read_text()
    version = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom)
    assert version is not None
    assert f"apache/kafka:{version.group(1)}" in (E2E / "k8s" / "manifests" / "kafka.yaml").read_text()
