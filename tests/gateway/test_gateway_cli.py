"""`tierkeeper gateway` refuses bad settings with one line before it listens or reads anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage_core.cli.main import main


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--cache-bytes", "0"], "--cache-bytes must be >= 1"),
        (["--tier-threads", "0"], "--tier-threads must be >= 1"),
        (["--readahead-blocks", "-1"], "--readahead-blocks must be >= 0"),
        (["--listen", "127.0.0.1"], "--listen '127.0.0.1': expected HOST:PORT"),
        (["--bootstrap-servers", "b:1,b:65536"], "--bootstrap-servers 'b:65536': expected HOST:PORT"),
        (["--metrics-listen", "[::1]"], "--metrics-listen '[::1]': expected HOST:PORT"),
        (["--discovery-interval-seconds", "0"], "--discovery-interval-seconds must be > 0"),
        (["--reload-interval-seconds", "-1"], "--reload-interval-seconds must be > 0, got -1.0"),
        (["--tls-cert", "cert.pem"], "--tls-cert and --tls-key go together"),
    ],
)
def test_bad_settings_get_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], named: str
) -> None:
    argv = ["gateway", "--bootstrap-servers", "127.0.0.1:1", "--remote", f"file://{tmp_path}", *flags]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tierkeeper gateway: error: ") and named in err[0], err
