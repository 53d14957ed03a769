"""Resolve a real Apache Kafka runtime (jars) from Maven Central into the cache.

The version is pinned once, in e2e/kafka/pom.xml. Maven downloads and checksums the artifacts into its
own local repository; we copy the resolved runtime classpath into ``<cache>/kafka-<version>/libs`` and mark
it complete, so later runs start brokers without touching Maven at all.
"""

from __future__ import annotations

import functools
import hashlib
import os
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
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise HarnessError("no java found (set JAVA_HOME or put Java 17+ on PATH)")
    _java_version(java)
    return java


@functools.cache
def _java_version(java: str) -> str:
    """``java -version`` of ``java``, checked to be 17+: asked once per process (every JVM the harness
    starts went through here, and each ask is a JVM start of its own)."""
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    match = re.search(r'version "(\d+)', out)
    if not match or int(match.group(1)) < 17:
        raise HarnessError(f"Kafka 4.x needs Java 17+, {java} says: {out.strip().splitlines()[:1]}")
    return out


QUICK_START_FLAGS = ("-XX:TieredStopAtLevel=1",)
"""JVM flags of a broker started for a test: the C1 compiler only. A test's broker handles little traffic,
and C2 compiling Kafka's startup paths took nearly half the CPU of a start (5.7-7.6 CPU-seconds, 3.2-4.4
with C1 only, measured here) on a shared 2-core machine where every test waits for its brokers.
Benchmarks run brokers without them (``quick_start``)."""


def class_archive() -> Path:
    """Where the class-data archive of a broker JVM for this Java and these Kafka jars lives (made by
    ``make harness``, :func:`harness.kafka.ensure_class_archive`). A broker started with it maps Kafka's
    classes, already parsed and verified, instead of loading them from the jars: about half the CPU of a
    start. A stale or foreign archive is ignored by the JVM (-Xshare:auto), so the key is only to keep
    one per Java and classpath."""
    java = java_binary()
    key = "\0".join([os.path.realpath(java), _java_version(java), classpath(), *QUICK_START_FLAGS])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_dir() / f"kafka-{kafka_version()}" / f"broker-classes-{digest}.jsa"


def class_archive_flags() -> list[str]:
    """``-XX:SharedArchiveFile=...`` when :func:`class_archive` exists, else nothing (a slower start)."""
    archive = class_archive()
    return [f"-XX:SharedArchiveFile={archive}"] if archive.is_file() else []


if __name__ == "__main__":
    print(kafka_libs())
