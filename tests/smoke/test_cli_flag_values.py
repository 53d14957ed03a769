"""Values given as text: the repeatable KEY=VALUE flags (--spark-conf, --catalog-property, recover's --config)
share one parser, and a storage option's value is read one way wherever it comes from."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from storage_core.adapters.store import storage_option_value
from storage_core.cli.common import add_bytes_arg, key_values, storage_options
from storage_core.cli.main import main
from storage_core.errors import ConfigError


def test_items_become_a_dictionary_the_last_of_a_key_winning() -> None:
    items = ["spark.a=1", " spark.b =x=y", "spark.a=2", "empty="]
    assert key_values(items, "--spark-conf") == {"spark.a": "2", "spark.b": "x=y", "empty": ""}


@pytest.mark.parametrize("item", ["no-equals-sign", "=value"])
def test_an_item_without_a_key_is_refused_naming_the_flag_and_the_item(item: str) -> None:
    with pytest.raises(ConfigError) as refused:
        key_values(["ok=1", item], "--catalog-property")
    assert str(refused.value) == f"--catalog-property {item!r}: expected KEY=VALUE"


def test_a_storage_option_is_its_json_when_it_parses_else_its_text() -> None:
    assert [storage_option_value(raw) for raw in ("true", "3", '{"a": [1]}', "s3.example", "")] == [
        True,
        3,
        {"a": [1]},
        "s3.example",
        "",
    ]
    args = argparse.Namespace(
        endpoint_url=None, region=None, anonymous=False, path_style=False, storage_option=["use_ssl=false"]
    )
    environ = {"TIERKEEPER_STORAGE_OPTION_TIMEOUT": "2.5", "TIERKEEPER_STORAGE_OPTION_PROFILE": "lab"}
    assert storage_options(args, environ) == {"use_ssl": False, "timeout": 2.5, "profile": "lab"}


@pytest.mark.parametrize("command", [["export", "--topic", "t"], ["table-maintenance"]])
def test_a_target_storage_option_without_a_key_is_refused_without_quoting_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """``--to-storage-option`` is checked as ``--storage-option`` is: an item without ``=`` may be a secret
    pasted by mistake, so the message names its place, not its text."""
    secret = "AKIA-pasted-secret"
    flags = ["--remote", f"file://{tmp_path}/tier", "--to", f"file://{tmp_path}/table"]
    assert main([*command, *flags, "--to-storage-option", "anon=true", "--to-storage-option", secret]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"tierkeeper {command[0]}: error: --to-storage-option number 2: expected KEY=VALUE"]


@pytest.mark.parametrize(
    ("default", "stated"),
    [(16 << 20, "16 MiB"), (1536 << 10, "1536 KiB"), (1000, "1000 bytes"), (0, "0 bytes")],
)
def test_a_byte_flag_states_the_default_it_has(default: int, stated: str) -> None:
    parser = argparse.ArgumentParser()
    add_bytes_arg(parser, "--chunk-bytes", default, "bytes a chunk (default {default})")
    assert parser.parse_args([]).chunk_bytes == default
    assert parser.parse_args(["--chunk-bytes", "7"]).chunk_bytes == 7
    assert f"(default {stated})" in " ".join(parser.format_help().split())
