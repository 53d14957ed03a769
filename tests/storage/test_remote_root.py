"""A remote URL whose bucket or root directory does not exist is an error for the commands that only read the
tier (a mistyped URL must not look like an empty tier: ``rebuild`` would restore nothing and exit 0), while an
existing but empty tier is listed as empty."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.moto_s3 import MotoServer
from storage_core.adapters.store import RemoteStore
from storage_core.cli.main import main
from storage_core.errors import RemoteStoreError


def test_ls_of_a_missing_directory_fails_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-tier"
    assert main(["ls", "--remote", f"file://{missing}"]) == 1
    err = capsys.readouterr().err
    assert f"directory '{missing}' does not exist" in err
    assert not missing.exists()  # reading never creates the tier


def test_ls_of_an_existing_empty_directory_lists_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ls", "--remote", f"file://{tmp_path}", "--json"]) == 0
    assert '"segments": []' in capsys.readouterr().out


@pytest.mark.parametrize("command", ["read", "rebuild", "recover", "scrub"])
def test_reading_commands_refuse_a_missing_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    missing = tmp_path / "typo"
    extra: dict[str, list[str]] = {
        "read": ["--topic", "t", "--partition", "0", "--from-offset", "0"],
        "rebuild": [
            "--log-dir",
            str(tmp_path / "data"),
            "--bootstrap-servers",
            "127.0.0.1:9",
            "--broker-id",
            "1",
        ],
        "recover": ["--topic", "t", "--bootstrap-servers", "127.0.0.1:9"],
        "scrub": [],
    }
    code = main([command, "--remote", f"file://{missing}", *extra[command]])
    err = capsys.readouterr().err
    assert code != 0, err
    assert "does not exist" in err, err
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())


def test_missing_bucket_is_an_error_and_an_empty_bucket_is_an_empty_tier(
    moto_server: MotoServer, s3_bucket: tuple[str, dict[str, Any]]
) -> None:
    url, options = s3_bucket
    RemoteStore(f"{url}/some/prefix", options).require_root()  # empty prefix of an existing bucket: fine
    with pytest.raises(RemoteStoreError, match="bucket 'tk-missing-bucket-0' does not exist"):
        RemoteStore("s3://tk-missing-bucket-0/tier", moto_server.storage_options()).require_root()
    RemoteStore("memory://tk-root-check").require_root()  # an in-memory tier exists once named


def test_a_refused_connection_is_named_an_unreachable_endpoint_not_a_missing_bucket(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Port 1 on loopback: nothing listens, the connection is refused at once.
    code = main(
        ["ls", "--remote", "s3://b/t", "--endpoint-url", "http://127.0.0.1:1", "--anonymous"]
        + ["--retry-attempts", "1"]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "endpoint http://127.0.0.1:1 is unreachable" in err, err
    assert "does not exist" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_refused_credentials_are_named_as_such_not_a_missing_bucket(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A moto server that checks credentials, as a real endpoint does: an unknown access key gets 403.
    server = MotoServer(tmp_path / "moto-auth", env={"INITIAL_NO_AUTH_ACTION_COUNT": "0"}).start()
    try:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAUNKNOWNKEY000000")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
        code = main(
            ["ls", "--remote", "s3://tk-any-bucket/t", "--endpoint-url", server.endpoint_url]
            + ["--path-style", "--retry-attempts", "1"]
        )
    finally:
        server.stop()
    err = capsys.readouterr().err
    assert code == 1
    assert "credentials were refused for bucket 'tk-any-bucket'" in err, err
    assert "does not exist" not in err and "not-the-secret" not in err


def test_missing_credentials_are_named_as_such_before_any_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-metadata lookup off this machine
    # Port 1: had a request been sent, the error would be the unreachable endpoint instead.
    code = main(
        ["ls", "--remote", "s3://b/t", "--endpoint-url", "http://127.0.0.1:1", "--retry-attempts", "1"]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "remote tier s3://b/t: no credentials found" in err, err
    assert "--anonymous" in err and "unreachable" not in err and "does not exist" not in err
    assert len(err.strip().splitlines()) == 1, err
