"""The Dockerfile keeps the image rules: pinned bases, two targets, numeric non-root user, no build tools
or pip cache in the final stages, installs through constraints.txt, OCI labels, no JVM in the operator.

There is no Docker engine on CI, so the rules are checked on the Dockerfile's text; each rule is also
shown catching a broken variant, so a rule that silently stopped matching would fail here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from dockerfile_rules import ALL_RULES, Dockerfile, parse, problems

from harness.paths import REPO_ROOT
from harness.shellcheck import shellcheck_path

DOCKERFILE = (REPO_ROOT / "Dockerfile").read_text()
Rule = Callable[[Dockerfile], list[str]]


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda rule: rule.__name__)
def test_rule_holds_on_the_dockerfile(rule: Rule) -> None:
    assert rule(parse(DOCKERFILE)) == []


def test_two_named_targets_with_the_console_script_as_entrypoint() -> None:
    dockerfile = parse(DOCKERFILE)
    for target in ("operator", "pipeline"):
        entrypoints = [e for stage in dockerfile.chain(target) for e in stage.all("ENTRYPOINT")]
        assert entrypoints and entrypoints[0] == '["tierkeeper"]', target


def test_only_the_pipeline_gets_java() -> None:
    dockerfile = parse(DOCKERFILE)
    pipeline_copies = [c for stage in dockerfile.chain("pipeline") for c in stage.all("COPY")]
    assert any("/opt/java/openjdk" in c for c in pipeline_copies)
    env = " ".join(e for stage in dockerfile.chain("pipeline") for e in stage.all("ENV"))
    assert "JAVA_HOME=/opt/java/openjdk" in env


def test_copied_sources_exist() -> None:
    for stage in parse(DOCKERFILE).stages:
        for copy in stage.all("COPY"):
            if "--from" in copy:
                continue
            for source in [w for w in copy.split() if not w.startswith("--")][:-1]:
                assert (REPO_ROOT / source).exists(), f"Dockerfile copies missing {source}"


BROKEN = {
    "check_pinned_bases": (r"ARG PYTHON_IMAGE=\S+", "ARG PYTHON_IMAGE=python:3.11-slim"),
    "check_targets": (r"AS pipeline\n", "AS pipeline-image\n"),
    "check_non_root_user": (r"USER 10001:10001\n# The Helm", "USER root\n# The Helm"),
    "check_final_stages_clean": (
        r"WORKDIR /tmp\n",
        "RUN apt-get update && apt-get install -y gcc && pip install cython\nWORKDIR /tmp\n",
    ),
    "check_constraints_used": (
        r"install-venv.sh spark /opt/tierkeeper - /build/constraints.txt /stage",
        "pip install --root /stage /wheels/pyspark-*.whl",
    ),
    "check_oci_labels": (r'org.opencontainers.image.revision="\$\{REVISION\}"', 'other="x"'),
    "check_no_jvm_in_operator": (
        r"COPY --from=project-venv /stage/ /\n# Numeric",
        "COPY --from=project-venv /stage/ /\nCOPY --from=jre /opt/java/openjdk /opt/java/openjdk\n# Numeric",
    ),
}


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda rule: rule.__name__)
def test_rule_catches_a_broken_dockerfile(rule: Rule) -> None:
    pattern, replacement = BROKEN[rule.__name__]
    broken, count = re.subn(pattern, lambda _: replacement, DOCKERFILE, count=1)
    assert count == 1, f"the mutation for {rule.__name__} no longer applies to the Dockerfile"
    assert rule(parse(broken)), f"{rule.__name__} did not notice: {replacement!r}"


def test_every_rule_has_a_broken_variant() -> None:
    assert sorted(BROKEN) == sorted(rule.__name__ for rule in ALL_RULES)
    assert problems(DOCKERFILE) == []


def test_install_script_is_executable_posix_sh_and_shellcheck_clean() -> None:
    script = REPO_ROOT / "docker" / "install-venv.sh"
    assert script.stat().st_mode & 0o111, "the Dockerfile runs it directly"
    assert script.read_text().startswith("#!/bin/sh\n")  # slim images have bash, but sh is the contract
    proc = subprocess.run(
        [str(shellcheck_path()), str(script)], capture_output=True, text=True, check=False, cwd=REPO_ROOT
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_frontend_image_is_pulled() -> None:
    # A `# syntax=` line makes BuildKit pull a frontend image by a floating tag before anything else.
    assert not re.match(r"\s*#\s*syntax\s*=", DOCKERFILE, re.IGNORECASE)


def test_the_image_build_scripts_are_executable_posix_sh_and_shellcheck_clean() -> None:
    """make images runs them on a CI machine with no Docker engine (docker/build_images.py)."""
    scripts = [REPO_ROOT / "docker" / name for name in ("local-bases.sh", "install-build-tools.sh")]
    for script in scripts:
        assert script.stat().st_mode & 0o111, script
        assert script.read_text().startswith("#!/bin/sh\n"), script
    proc = subprocess.run(
        [str(shellcheck_path()), *map(str, scripts)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_missing_build_tools_are_named_when_they_cannot_be_installed(tmp_path: Path) -> None:
    """Without buildah, podman, runc and mmdebstrap, and no apt-get to install them, `make images` (and so
    every container-mode test, through the built_images fixture) fails naming what is missing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "id").symlink_to(shutil.which("id") or "/usr/bin/id")
    proc = subprocess.run(
        ["/bin/sh", str(REPO_ROOT / "docker" / "install-build-tools.sh")],
        capture_output=True,
        text=True,
        env={"PATH": str(bin_dir)},
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "missing buildah podman runc mmdebstrap" in proc.stderr
    assert "apt-get install buildah podman runc mmdebstrap" in proc.stderr
