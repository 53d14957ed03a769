"""Credentials never show: commands run with known secret values against moto (through each way of
passing them, succeeding and failing) and everything captured is scanned: stdout, stderr, --json output,
exception text, reprs and every object written to the remote tier."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import s3fs

from harness.kafka import KafkaCluster
from harness.moto_s3 import MotoServer
from harness.ports import free_ports
from harness.tierkeeper_cli import run_cli
from storage_core.adapters.store import RemoteStore, redacted_url
from storage_core.cli.common import OPTION_ENV_PREFIX, is_credential_option
from storage_core.tiering.plan import CopyTask

from .secret_scan import leaks
from .topics import SMALL_SEGMENTS, create_topic

KEY = "AKIDSECRETVALUE0001"
SECRET = "SECRETVALUE-wJalrXUtnFEMI-K7MDENG"
SECRETS = (KEY, SECRET)


def _leaks(text: str) -> list[str]:
    return leaks(text, SECRETS)


class _Captured:
    def __init__(self) -> None:
        self.outputs: list[tuple[str, str]] = []

    def run(self, *argv: str, env: dict[str, str] | None = None, ok: bool | None) -> Any:
        proc = run_cli(*argv, env={"AWS_MAX_ATTEMPTS": "1", **(env or {})}, timeout=240)
        self.outputs.append((" ".join(argv), proc.stdout + proc.stderr))
        assert ok is None or (proc.returncode == 0) == ok, (argv, proc.stderr)
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc

    def assert_clean(self) -> None:
        leaked = [(cmd, _leaks(text)) for cmd, text in self.outputs if _leaks(text)]
        assert leaked == [], f"credentials printed by: {leaked}"


@pytest.fixture
def secret_bucket(moto_server: MotoServer) -> Iterator[str]:
    """A bucket on moto (which accepts any credentials, so the secret values are the ones used)."""
    fs = s3fs.S3FileSystem(**moto_server.storage_options())
    name = f"tk-secret-{os.urandom(4).hex()}"
    fs.mkdir(name)
    try:
        yield name
    finally:
        fs.rm(name, recursive=True)


def _ways(tmp_path: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    options_file = tmp_path / "storage-options.json"
    options_file.write_text(json.dumps({"key": KEY, "secret": SECRET}))
    return {
        "flags": (["--storage-option", f"key={KEY}", "--storage-option", f"secret={SECRET}"], {}),
        "file": (["--storage-options-file", str(options_file)], {}),
        "file-env": ([], {"TIERKEEPER_STORAGE_OPTIONS_FILE": str(options_file)}),
        "env": ([], {f"{OPTION_ENV_PREFIX}KEY": KEY, f"{OPTION_ENV_PREFIX}SECRET": SECRET}),
    }


@pytest.mark.parametrize("way", ["flags", "file", "file-env", "env"])
def test_credentials_never_appear_in_output_or_in_the_tier(
    kafka_broker: KafkaCluster, moto_server: MotoServer, secret_bucket: str, tmp_path: Path, way: str
) -> None:
    topic = create_topic(kafka_broker, SMALL_SEGMENTS)
    creds, env = _ways(tmp_path)[way]
    # No AWS_* credentials in the environment: the only credentials are the ones under test.
    env = {**env, "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}
    remote = [
        "--remote",
        f"s3://{secret_bucket}/tier",
        "--endpoint-url",
        moto_server.endpoint_url,
        "--path-style",
    ]
    kafka = ["--bootstrap-servers", kafka_broker.bootstrap_servers]
    logs = ["--log-dir", str(kafka_broker.log_dir(1)), "--topic", topic]
    c = _Captured()

    copied = c.run("copy", *logs, *kafka, *remote, *creds, "--json", env=env, ok=True)
    assert json.loads(copied.stdout)["copied_segments"] > 0
    closed = f"http://127.0.0.1:{free_ports(1)[0]}"
    unreachable = ["--remote", f"s3://{secret_bucket}/tier", "--endpoint-url", closed, "--path-style"]
    c.run("copy", *logs, *kafka, *unreachable, *creds, "--json", env=env, ok=False)
    if way != "flags":  # the other ways reach the same options; the full round runs once
        c.run("ls", *remote, *creds, "--json", env=env, ok=True)
        c.assert_clean()
        return
    c.run("copy", *logs, *kafka, *remote, *creds, env=env, ok=True)
    c.run("ls", *remote, *creds, "--json", env=env, ok=True)
    c.run("ls", *remote, *creds, env=env, ok=True)
    c.run(
        "read", *remote, *creds, "--topic", topic, "--partition", "0", "--from-offset", "0", env=env, ok=True
    )
    c.run("cleanup", *remote, *creds, *kafka, "--dry-run", "--json", env=env, ok=True)

    # Failing runs: a missing bucket, a closed endpoint, a missing topic, refused flags.
    missing = [
        "--remote",
        "s3://no-such-bucket-tk/tier",
        "--endpoint-url",
        moto_server.endpoint_url,
        "--path-style",
    ]
    c.run("copy", *logs, *kafka, *missing, *creds, env=env, ok=False)
    c.run("ls", *missing, *creds, "--json", env=env, ok=None)  # lists nothing today (exit 0)
    c.run("cleanup", *unreachable, *creds, env=env, ok=False)
    c.run(
        "read",
        *remote,
        *creds,
        "--topic",
        "gone",
        "--partition",
        "0",
        "--from-offset",
        "0",
        env=env,
        ok=False,
    )
    c.run("copy", *logs, *kafka, *remote, *creds, "--parallelism", "0", env=env, ok=False)
    c.assert_clean()

    # Nothing Tierkeeper wrote to the remote tier carries them either (metadata, markers, manifests).
    fs = s3fs.S3FileSystem(**moto_server.storage_options())
    written = fs.find(f"{secret_bucket}/tier")
    assert written, "the copy wrote objects"
    for path in written:
        if not path.endswith(".log"):
            assert _leaks(fs.cat_file(path).decode("latin-1")) == [], path


def test_malformed_credential_input_is_refused_without_quoting_it(tmp_path: Path) -> None:
    c = _Captured()
    remote = ["--remote", f"file://{tmp_path / 'tier'}"]
    c.run("ls", *remote, "--storage-option", SECRET, ok=False)  # pasted without KEY=
    broken = tmp_path / "broken.json"
    broken.write_text('{"key": "' + KEY + '", "secret": ' + SECRET + "}")  # not JSON
    c.run("ls", *remote, "--storage-options-file", str(broken), ok=False)
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps([KEY, SECRET]))
    c.run("ls", *remote, "--storage-options-file", str(listed), ok=False)
    c.run("ls", *remote, "--storage-options-file", str(tmp_path / "absent.json"), ok=False)
    c.assert_clean()
    assert not (tmp_path / "tier").exists()


def test_reprs_and_urls_hide_credentials(tmp_path: Path) -> None:
    options = {"key": KEY, "secret": SECRET}
    task = CopyTask(
        log_dir=str(tmp_path),
        topic="t",
        partition=0,
        remote_url="memory://tier",
        storage_options=options,
        last_stable_offset=None,
        high_watermark=None,
    )
    assert _leaks(repr(task)) == [] and _leaks(str(task)) == []
    store = RemoteStore(f"file://{tmp_path}", {})
    assert _leaks(repr(store)) == []
    assert redacted_url(f"s3://{KEY}:{SECRET}@bucket/tier") == "s3://***@bucket/tier"
    assert redacted_url(f"http://{KEY}:{SECRET}@host:9000/x@y") == "http://***@host:9000/x@y"
    assert redacted_url("s3://bucket/a@b") == "s3://bucket/a@b"
    assert all(
        is_credential_option(n) for n in ("key", "secret", "token", "aws_secret_access_key", "password")
    )
    assert not any(is_credential_option(n) for n in ("endpoint_url", "region_name", "anon"))


def test_one_rule_says_which_names_hold_credentials() -> None:
    from storage_core.api.cluster import credential_like

    secret = (
        "sasl.jaas.config",
        "ssl.key.password",
        "account_key",
        "sas_token",
        "sasl.password",
        "private_key",
    )
    assert all(credential_like(n) and is_credential_option(n) for n in secret)
    # Settings that only name a file or a mechanism may be given inline, but a command still never echoes
    # a storage option whose name merely contains "key" (a false alarm there only hides a harmless option).
    for name in ("ssl.keystore.location", "sasl.mechanism", "ssl.truststore.type"):
        assert not credential_like(name), name
    assert is_credential_option("ssl.keystore.location") and not is_credential_option("endpoint_url")


def test_the_read_command_recover_prints_leaves_credentials_out() -> None:
    from storage_core.cli.main import build_parser
    from storage_core.cli.recover import read_command

    args = build_parser().parse_args(
        [
            "recover",
            "--topic",
            "orders",
            "--bootstrap-servers",
            "k:9092",
            "--remote",
            "s3://b/tier",
            "--storage-option",
            f"key={KEY}",
            "--storage-option",
            f"secret={SECRET}",
            "--storage-option",
            "region_name=eu-west-1",
            "--storage-options-file",
            "/etc/tierkeeper/s3.json",
        ]
    )
    command = read_command(args, "q0nC4cY1Rk2H9b8hQ1XW3w", 0, 5)
    assert _leaks(command) == []
    assert "--storage-option region_name=eu-west-1" in command
    assert "--storage-options-file /etc/tierkeeper/s3.json" in command
