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
    libs = cache_dir() / f"kafka-{version}" / "libs"
    return maven_jars(
        POM, libs, _pom_digest(), what=f"Kafka {version}", expect=f"kafka_2.13-{version}", log=log
    )


def maven_jars(pom: Path, jars_dir: Path, digest: str, *, what: str, expect: str, log: bool = True) -> Path:
    """``jars_dir`` holding the runtime jars ``pom`` resolves, fetched by Maven once per ``digest`` of the
    pom; ``expect`` is the file-name prefix of the jar the pom is for (checked: an empty resolution fails)."""
    marker = jars_dir.parent / "COMPLETE"
    if marker.is_file() and marker.read_text().strip() == digest:
        return jars_dir
    mvn = shutil.which("mvn")
    if mvn is None:
        raise HarnessError(f"Maven (mvn) is not on PATH: it is needed once to fetch the jars of {what}")
    staging = jars_dir.with_name(jars_dir.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    if log:
        print(f"[harness] resolving {what} jars from Maven Central into {jars_dir}", file=sys.stderr)
    goal = ["dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={staging}"]
    proc = subprocess.run(
        [mvn, "-B", "-q", "-f", str(pom), *goal], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise HarnessError(
            f"mvn could not resolve {what} (exit {proc.returncode}):\n"
            f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
    if not any(j.name.startswith(expect) for j in staging.glob("*.jar")):
        raise HarnessError(f"Maven finished but {expect}*.jar is missing in {staging}")
    shutil.rmtree(jars_dir, ignore_errors=True)
    staging.rename(jars_dir)
    marker.write_text(digest)
    return jars_dir


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
