"""Resolve a real Apache Kafka runtime (jars) from Maven Central into the cache.

The version is pinned once, in e2e/kafka/pom.xml. Maven downloads and checksums the artifacts into its
own local repository; we copy the resolved runtime classpath into ``<cache>/kafka-<version>/libs`` and mark
it complete, so later runs start brokers without touching Maven at all.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

from harness.paths import REPO_ROOT, cache_dir

POM = REPO_ROOT / "e2e" / "kafka" / "pom.xml"


class HarnessError(RuntimeError):
    """A real component could not be prepared or started; the message says why."""


def kafka_version() -> str:
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", POM.read_text())
    if not match:
        raise HarnessError(f"no <kafka.version> in {POM}")
    return match.group(1).strip()


def _pom_digest() -> str:
    return hashlib.sha256(POM.read_bytes()).hexdigest()[:16]


def kafka_libs(*, log: bool = True) -> Path:
    """Return the directory holding Kafka's runtime jars, resolving them with Maven if needed."""
    version = kafka_version()
    target = cache_dir() / f"kafka-{version}"
    libs = target / "libs"
    marker = target / "COMPLETE"
    if marker.is_file() and marker.read_text().strip() == _pom_digest():
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise HarnessError("Maven (mvn) is not on PATH: it is needed once to fetch the Kafka jars")
    staging = target / "libs.staging"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    if log:
        print(f"[harness] resolving Kafka {version} jars from Maven Central into {libs}", file=sys.stderr)
    proc = subprocess.run(
        [
            mvn,
            "-B",
            "-q",
            "-f",
            str(POM),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={staging}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise HarnessError(
            f"mvn could not resolve Kafka {version} (exit "
            f"{proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
    jars = list(staging.glob("*.jar"))
    if not any(j.name.startswith(f"kafka_2.13-{version}") for j in jars):
        raise HarnessError(f"Maven finished but kafka_2.13-{version}.jar is missing in {staging}")
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)
    marker.write_text(_pom_digest())
    return libs


def classpath() -> str:
    return ":".join(str(p) for p in sorted(kafka_libs().glob("*.jar")))


def java_binary() -> str:
    """The Java 17+ used to run Kafka; ``$JAVA_HOME/bin/java`` wins over PATH."""
    import os

    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise HarnessError("no java found (set JAVA_HOME or put Java 17+ on PATH)")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    match = re.search(r'version "(\d+)', out)
    if not match or int(match.group(1)) < 17:
        raise HarnessError(f"Kafka 4.x needs Java 17+, {java} says: {out.strip().splitlines()[:1]}")
    return java


if __name__ == "__main__":
    print(kafka_libs())
