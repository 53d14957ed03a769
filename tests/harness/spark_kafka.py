"""Spark's own Kafka source (spark-sql-kafka-0-10) for the tests, resolved from Maven Central.

Pinned in e2e/spark-kafka/pom.xml, which must name the pyspark version the project pins. Maven resolves
the connector and its compile-scope dependencies once; the jars that pyspark does not already ship are
copied into ``<cache>/spark-kafka-<version>/jars`` and marked complete, so later runs do not touch Maven.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from harness.kafka_dist import HarnessError, maven_jars
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
    jars_dir = cache_dir() / f"spark-kafka-{version}" / "jars"
    digest = hashlib.sha256(POM.read_bytes()).hexdigest()[:16]
    what = f"spark-sql-kafka-0-10 {version}"
    maven_jars(POM, jars_dir, digest, what=what, expect=f"spark-sql-kafka-0-10_2.13-{version}", log=log)
    # Jars pyspark already ships (Scala, Spark's own modules) stay out: two copies of a class on the
    # classpath is asking for trouble.
    shipped = {_artifact(j.name) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(j for j in jars_dir.glob("*.jar") if _artifact(j.name) not in shipped)


if __name__ == "__main__":
    print("\n".join(str(j) for j in connector_jars()))
