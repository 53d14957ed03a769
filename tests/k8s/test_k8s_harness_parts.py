"""The pure parts of the Kubernetes harness: the go.mod rewrite of the build, image names, $(VAR)
expansion, argv from command/args, and which directories a non-root container user needs opened."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.k8s_build import rewrite_go_mod
from harness.k8s_version import KUBERNETES_VERSION, staging_version
from harness.kafka_dist import HarnessError
from harness.pod_images import ImageCommand, repository_of
from harness.pod_spec import PodSpecError, container_argv, expand, field_value
from harness.pod_worker import closed_ancestors

GO_MOD = """module k8s.io/kubernetes

require (
\tk8s.io/api v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/cri-client => ./staging/src/k8s.io/cri-client
\tgithub.com/other/thing => github.com/other/thing v1.2.3
)
"""


def test_staging_version_follows_the_pin() -> None:
    assert staging_version("v1.33.0") == "v0.33.0"
    assert staging_version("v1.34.2") == "v0.34.2"
    assert staging_version(KUBERNETES_VERSION).startswith("v0.")
    with pytest.raises(ValueError):
        staging_version("v2.0.0")


def test_go_mod_staging_replacements_point_at_released_modules() -> None:
    rewritten = rewrite_go_mod(GO_MOD, "v0.33.0")
    assert "\tk8s.io/api => k8s.io/api v0.33.0\n" in rewritten
    assert "\tk8s.io/cri-client => k8s.io/cri-client v0.33.0\n" in rewritten
    assert "github.com/other/thing => github.com/other/thing v1.2.3" in rewritten
    assert "./staging" not in rewritten


def test_go_mod_rewrite_refuses_a_layout_it_does_not_know() -> None:
    with pytest.raises(HarnessError, match="staging"):
        rewrite_go_mod("replace k8s.io/api => ./staging/src/k8s.io/api/v2 // odd\n", "v0.33.0")


@pytest.mark.parametrize(
    ("image", "repository"),
    [
        ("tierkeeper", "tierkeeper"),
        ("tierkeeper:0.1.0", "tierkeeper"),
        ("docker.io/library/python:3.11-slim", "python"),
        ("python@sha256:abcd", "python"),
        ("registry.example:5000/team/tool:1", "registry.example:5000/team/tool"),
    ],
)
def test_repository_of(image: str, repository: str) -> None:
    assert repository_of(image) == repository


def test_expand_like_the_kubelet() -> None:
    env = {"A": "1", "B": "two"}
    assert expand("$(A)-$(B)", env) == "1-two"
    assert expand("$(MISSING) stays", env) == "$(MISSING) stays"
    assert expand("$$(A) is escaped", env) == "$(A) is escaped"


def test_command_replaces_entrypoint_and_args_replace_cmd() -> None:
    image = ImageCommand(entrypoint=("tk",), cmd=("--help",))
    assert container_argv({"name": "c"}, image, {}) == ["tk", "--help"]
    assert container_argv({"name": "c", "args": ["ls"]}, image, {}) == ["tk", "ls"]
    assert container_argv({"name": "c", "command": ["sh"]}, image, {}) == ["sh"]
    assert container_argv({"name": "c", "command": ["sh"], "args": ["$(X)"]}, image, {"X": "-c"}) == [
        "sh",
        "-c",
    ]
    with pytest.raises(PodSpecError, match="no command"):
        container_argv({"name": "c"}, ImageCommand(), {})


def test_field_refs() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "n", "uid": "u", "labels": {"app": "a"}},
        "spec": {"nodeName": "node", "serviceAccountName": "sa"},
    }
    assert field_value(pod, "metadata.name") == "p"
    assert field_value(pod, "spec.nodeName") == "node"
    assert field_value(pod, "metadata.labels['app']") == "a"
    assert field_value(pod, "status.podIP") == "127.0.0.1"
    with pytest.raises(PodSpecError, match="not supported"):
        field_value(pod, "spec.hostname")


def test_closed_ancestors_outermost_first(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    inner = outer / "inner"
    target = inner / "lib" / "python"
    target.mkdir(parents=True)
    outer.chmod(0o700)
    inner.chmod(0o750)
    try:
        found = closed_ancestors((str(target),))
        assert found[-2:] == [str(outer), str(inner)]
        assert str(target.parent) not in found
    finally:
        outer.chmod(0o755)


FAKE_GO = """#!/bin/sh
# Stands in for the Go toolchain: records each call; "builds" by writing an executable file.
echo "$*" >> "$FAKE_GO_LOG"
case "$1" in
  mod) printf '{"Dir": "%s"}' "$FAKE_MODULE" ;;
  build)
    while [ "$1" != "-o" ]; do shift; done
    grep -q 'k8s.io/api => k8s.io/api v0.' go.mod || exit 3
    test ! -e vendor || exit 4
    printf '#!/bin/sh\\n' > "$2" && chmod +x "$2" ;;
esac
"""


def _fake_toolchain(tmp_path: Path) -> dict[str, str]:
    bin_dir, module = tmp_path / "fake-bin", tmp_path / "module"
    bin_dir.mkdir()
    (module / "vendor").mkdir(parents=True)
    (module / "go.mod").write_text(GO_MOD)
    go = bin_dir / "go"
    go.write_text(FAKE_GO)
    go.chmod(0o755)
    return {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "FAKE_GO_LOG": str(tmp_path / "go-calls.log"),
        "FAKE_MODULE": str(module),
        "TIERKEEPER_CACHE": str(tmp_path / "cache"),
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }


def test_two_concurrent_runs_build_once_and_later_runs_not_at_all(tmp_path: Path) -> None:
    env = _fake_toolchain(tmp_path)
    argv = [sys.executable, "-m", "harness.k8s_build"]
    runs = [
        subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in "ab"
    ]
    results = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], results
    bin_dir = Path(env["TIERKEEPER_CACHE"]) / f"k8s-{KUBERNETES_VERSION}" / "bin"
    assert {out.strip() for out, _ in results} == {str(bin_dir)}
    calls = Path(env["FAKE_GO_LOG"]).read_text().splitlines()
    assert [call.split()[0] for call in calls] == ["mod", "build", "build"]  # one run built, the other waited
    assert sorted(path.name for path in bin_dir.iterdir()) == ["kube-apiserver", "kube-controller-manager"]
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=True)
    assert again.stdout.strip() == str(bin_dir) and "building" not in again.stderr
    assert len(Path(env["FAKE_GO_LOG"]).read_text().splitlines()) == 3
