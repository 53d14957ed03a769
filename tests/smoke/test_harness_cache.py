"""Once resolved, Kafka's jars are reused from the cache: no Maven, no download."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness.kafka_dist import kafka_libs, kafka_version


def test_second_resolution_needs_no_maven(tmp_path: Path) -> None:
    libs = kafka_libs()
    assert (libs / f"kafka_2.13-{kafka_version()}.jar").is_file()
    # A PATH with python but without mvn: resolving again must come straight from the cache.
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python").symlink_to(sys.executable)
    env = {**os.environ, "PATH": str(bare)}
    proc = subprocess.run(
        [str(bare / "python"), "-m", "harness.kafka_dist"],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[1],
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(libs)
    assert "resolving" not in proc.stderr
