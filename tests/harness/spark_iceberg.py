"""Apache Iceberg's Spark runtime (iceberg-spark-runtime-<spark minor>_2.13) for the tests, resolved from
Maven Central once (pinned in e2e/spark-iceberg/pom.xml) and cached like the Kafka connector's jars. The
tests read the tables ``tierkeeper export --format iceberg`` commits through Spark's Iceberg reader."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from harness.kafka_dist import HarnessError, maven_jars
from harness.paths import REPO_ROOT, cache_dir

POM = REPO_ROOT / "e2e" / "spark-iceberg" / "pom.xml"


def _property(name: str) -> str:
    match = re.search(rf"<{re.escape(name)}>([^<]+)</{re.escape(name)}>", POM.read_text())
    if not match:
        raise HarnessError(f"no <{name}> in {POM}")
    return match.group(1).strip()


def iceberg_version() -> str:
    return _property("iceberg.version")


def runtime_jars(*, log: bool = True) -> list[Path]:
    """The runtime jar (shaded: it carries what it needs), resolving it with Maven if needed."""
    import pyspark

    minor = _property("spark.minor")
    if not pyspark.__version__.startswith(minor + "."):
        raise HarnessError(f"pyspark {pyspark.__version__} is installed, but {POM} is for Spark {minor}")
    version = iceberg_version()
    jars_dir = cache_dir() / f"spark-iceberg-{minor}-{version}" / "jars"
    digest = hashlib.sha256(POM.read_bytes()).hexdigest()[:16]
    artifact = f"iceberg-spark-runtime-{minor}_2.13"
    maven_jars(POM, jars_dir, digest, what=f"{artifact} {version}", expect=f"{artifact}-{version}", log=log)
    return sorted(jars_dir.glob("*.jar"))


if __name__ == "__main__":
    print("\n".join(str(j) for j in runtime_jars()))
