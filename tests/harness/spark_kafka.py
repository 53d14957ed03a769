"""Spark's own Kafka source (spark-sql-kafka-0-10) for the tests, resolved from Maven Central.

Pinned in e2e/spark-kafka/pom.xml, which must name the pyspark version the project pins. Maven resolves
the connector and its compile-scope dependencies once; the jars that pyspark does not already ship are
copied into ``<cache>/spark-kafka-<version>/jars`` and marked complete, so later runs do not touch Maven.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

from harness.kafka_dist import HarnessError
from harness.paths import REPO_ROOT, cache_dir

POM = REPO_ROOT / "e2e" / "spark-kafka" / "pom.xml"
_VERSIONED = re.compile(r"^(?P<artifact>.+?)-\d[\w.+-]*\.jar$")


def connector_version() -> str:
    match = re.search(r"<spark\.version>([^<]+)</spark\.version>", POM.read_text())
    if not match:
        raise HarnessError(f"no <spark.version> in {POM}")
    return match.group(1).strip()


def _artifact(jar: str) -> str:
    match = _VERSIONED.match(jar)
    return match["artifact"] if match else jar


def connector_jars(*, log: bool = True) -> list[Path]:
    """The connector's jars (those pyspark does not ship), resolving them with Maven if needed."""
    import pyspark

    version = connector_version()
    if pyspark.__version__ != version:
        raise HarnessError(
            f"pyspark {pyspark.__version__} is installed, but {POM} pins the Kafka connector "
            f"of Spark {version}"
        )
    target = cache_dir() / f"spark-kafka-{version}"
    jars_dir, marker = target / "jars", target / "COMPLETE"
    digest = hashlib.sha256(POM.read_bytes()).hexdigest()[:16]
    if not (marker.is_file() and marker.read_text().strip() == digest):
        mvn = shutil.which("mvn")
        if mvn is None:
            raise HarnessError(
                "Maven (mvn) is not on PATH: it is needed once to fetch Spark's Kafka connector"
            )
        staging = target / "jars.staging"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        if log:
            print(f"[harness] resolving spark-sql-kafka-0-10 {version} into {jars_dir}", file=sys.stderr)
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
                f"mvn could not resolve spark-sql-kafka-0-10 {version} (exit {proc.returncode}):\n"
                f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
            )
        if not any(j.name.startswith(f"spark-sql-kafka-0-10_2.13-{version}") for j in staging.glob("*.jar")):
            raise HarnessError(f"Maven finished but spark-sql-kafka-0-10_2.13-{version}.jar is missing")
        shutil.rmtree(jars_dir, ignore_errors=True)
        staging.rename(jars_dir)
        marker.write_text(digest)
    # Jars pyspark already ships (Scala, Spark's own modules) stay out: two copies of a class on the
    # classpath is asking for trouble.
    shipped = {_artifact(j.name) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(j for j in jars_dir.glob("*.jar") if _artifact(j.name) not in shipped)


if __name__ == "__main__":
    print("\n".join(str(j) for j in connector_jars()))
