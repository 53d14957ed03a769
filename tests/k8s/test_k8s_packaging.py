"""Entry points of the operator: the subcommand module, ``python -m tierkeeper_operator``, the Dockerfile."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import replace

import pytest

from harness.paths import REPO_ROOT
from storage_core.errors import ConfigError
from tierkeeper_operator import cli
from tierkeeper_operator.run import settings_from_args
from tierkeeper_operator.settings import OperatorSettings, ProbeSettings, ScopeSettings


def parser_with_operator_verb() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tierkeeper")
    cli.register(parser.add_subparsers(dest="command"))
    return parser


def test_subcommand_parses_scope_and_liveness() -> None:
    args = parser_with_operator_verb().parse_args(
        ["operator", "-n", "kafka", "--namespace", "streams", "--liveness", "http://0.0.0.0:8080/healthz"]
    )
    assert callable(args.handler)
    assert settings_from_args(args) == OperatorSettings(
        scope=ScopeSettings(namespaces=("kafka", "streams"), all_namespaces=False),
        probes=ProbeSettings(liveness="http://0.0.0.0:8080/healthz"),
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--reconcile-interval", "0"], "--reconcile-interval must be > 0, got 0.0"),
        (["--peering-lifetime", "4"], "--peering-lifetime must be >= 5 seconds, got 4"),
        (
            ["--gateway-service-monitor-label", "release"],
            "--gateway-service-monitor-label 'release': expected KEY=VALUE",
        ),
    ],
)
def test_a_bad_setting_is_refused_by_its_flag_before_anything_runs(flags: list[str], message: str) -> None:
    args = parser_with_operator_verb().parse_args(["operator", "-A", *flags])
    with pytest.raises(ConfigError) as refused:
        settings_from_args(args)
    assert str(refused.value) == message


def test_this_process_fills_in_only_what_the_command_line_left_open() -> None:
    args = parser_with_operator_verb().parse_args(["operator", "-n", "kafka"])
    told = settings_from_args(args)
    assert told.peering.identity == "" and told.peering.priority is None
    started = told.for_this_process({"POD_ID": "tierkeeper-0"})
    assert started.peering.identity == "tierkeeper-0" and started.peering.priority is not None
    assert started.peering.priority < 0  # minus the start time: older replicas outrank it
    assert replace(started, peering=told.peering) == told  # nothing else changes
    explicit = settings_from_args(
        parser_with_operator_verb().parse_args(["operator", "-A", "--priority", "7"])
    )
    assert explicit.for_this_process({}).peering.priority == 7


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


# The Dockerfile's rules are checked in tests/packaging/, the e2e scripts in tests/e2e/.


LOG_SCRIPT = """
import logging, sys
from tierkeeper_operator import cli
from tierkeeper_operator.kube import log_ref
from tierkeeper_operator.run import configure_logging, settings_from_args
import argparse
import json
parser = argparse.ArgumentParser(prog="tierkeeper")
cli.register(parser.add_subparsers(dest="command"))
configure_logging(settings_from_args(parser.parse_args(sys.argv[1:])).logging)
obj = {"apiVersion": "tierkeeper.io/v1alpha1", "kind": "TieredBroker",
       "metadata": {"namespace": "kafka", "name": "broker-0", "uid": "u1"}}
logging.getLogger("tierkeeper_operator.x").warning("about %s", "it", extra=log_ref(obj))
logging.getLogger("tierkeeper_operator.x").info("not about an object")
"""


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_log_format_json_is_one_object_per_line_naming_the_resource(log_format: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", LOG_SCRIPT, "operator", "-A", "--log-format", log_format],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT,
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 2, proc.stderr
    if log_format == "text":
        assert "[kafka/broker-0] about it" in lines[0] and not lines[0].startswith("{")
        return
    about, other = (json.loads(line) for line in lines)
    assert about["message"] == "about it" and about["severity"] == "warn"
    assert about["object"] == {
        "apiVersion": "tierkeeper.io/v1alpha1",
        "kind": "TieredBroker",
        "namespace": "kafka",
        "name": "broker-0",
        "uid": "u1",
    }
    assert other["message"] == "not about an object" and "object" not in other
