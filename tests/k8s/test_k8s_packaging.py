"""Entry points of the operator: the subcommand module, ``python -m tierkeeper_operator``, the Dockerfile."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from harness.paths import REPO_ROOT
from tierkeeper_operator import cli
from tierkeeper_operator.run import OperatorOptions, options_from_args


def parser_with_operator_verb() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tierkeeper")
    cli.register(parser.add_subparsers(dest="command"))
    return parser


def test_subcommand_parses_scope_and_liveness() -> None:
    args = parser_with_operator_verb().parse_args(
        ["operator", "-n", "kafka", "--namespace", "streams", "--liveness", "http://0.0.0.0:8080/healthz"]
    )
    assert callable(args.handler)
    assert options_from_args(args) == OperatorOptions(
        namespaces=("kafka", "streams"), all_namespaces=False, liveness_endpoint="http://0.0.0.0:8080/healthz"
    )


def test_subcommand_needs_a_scope() -> None:
    with pytest.raises(SystemExit) as exit_info:
        parser_with_operator_verb().parse_args(["operator"])
    assert exit_info.value.code == 2


def test_namespace_and_all_namespaces_exclude_each_other() -> None:
    with pytest.raises(SystemExit):
        parser_with_operator_verb().parse_args(["operator", "-A", "-n", "kafka"])


def test_python_dash_m_help() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tierkeeper_operator", "--help"],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT / "operator",
    )
    assert proc.returncode == 0, proc.stderr
    assert "--all-namespaces" in proc.stdout


def test_nothing_is_importable_as_operator_from_the_repository() -> None:
    assert not (REPO_ROOT / "operator" / "__init__.py").exists()
    proc = subprocess.run(
        [sys.executable, "-c", "import operator; print(operator.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT,
    )
    location = proc.stdout.strip()  # a namespace package made of our folder would print None
    assert location.endswith("operator.py") and not location.startswith(str(REPO_ROOT)), location


def test_dockerfile_shape() -> None:
    lines = [
        line.strip()
        for line in (REPO_ROOT / "Dockerfile").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    froms = [line for line in lines if line.startswith("FROM ")]
    assert froms and all(line.split()[1] == "python:3.11-slim" for line in froms)
    assert lines[-2:] == ['ENTRYPOINT ["tierkeeper"]', 'CMD ["--help"]']
    user = [line for line in lines if line.startswith("USER ")][-1]
    assert user.split()[1].split(":")[0] not in {"0", "root"}
    assert any(line.startswith("RUN pip install") and line.endswith(" .") for line in lines)
    for line in lines:
        if line.startswith("COPY ") and "--from" not in line:
            for source in line.split()[1:-1]:
                assert (REPO_ROOT / source).exists(), f"Dockerfile copies missing {source}"


def test_kind_smoke_script_parses_and_uses_existing_files() -> None:
    script = REPO_ROOT / "e2e" / "k8s" / "kind-smoke.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    assert script.stat().st_mode & 0o111, "kind-smoke.sh must be executable"
    text = script.read_text()
    for path in ("crds/", "charts/tierkeeper", "examples/tieredtopic.yaml", "examples/tieredbroker.yaml"):
        assert path in text and (REPO_ROOT / path).exists(), path
