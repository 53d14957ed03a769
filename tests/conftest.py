"""Fixtures that start the real components Tierkeeper runs against.

Every fixture starts its component or fails with the reason; none skips. Helpers live in tests/harness/
so the e2e scripts can use them too.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from harness.control_plane import ControlPlane
from harness.kafka import SASL_USER, KafkaCluster
from harness.moto_s3 import MotoServer
from harness.pod_images import built_images as build_images
from harness.pod_images import container_images
from harness.s3_faults import FaultPlan, FaultProxy
from harness.spark import local_session
from harness.spark_iceberg import runtime_jars
from harness.spark_kafka import connector_jars

# Hypothesis fails an example that runs past 200 ms and a strategy that generates slowly: on a machine
# other sessions keep busy that measures the machine, not the code, and no test may depend on its speed.
settings.register_profile("tierkeeper", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("tierkeeper")

# ---- the fast lane (`make check`) -------------------------------------------------------------------------
# The tests that need no Kafka, Spark, control plane or tool the harness builds or downloads (helm, kubectl,
# the kstatus and Prometheus rules checkers, ShellCheck), so they run on a fresh clone after `make setup`:
# everything else runs in `make test`. A test is left out when it uses a fixture that starts one of them
# (directly or through other fixtures), when its module starts or uses one itself, or when its whole
# directory is about them.
HEAVY_FIXTURES = frozenset(
    {
        "kafka_broker",
        "sasl_broker",
        "kafka_cluster_factory",
        "spark",
        "k8s_control_plane",
        "built_images",
        "container_mode",
    }
)
HEAVY_SOURCE = (
    "KafkaCluster(",
    "local_session(",
    "ControlPlane(",
    "CampaignSystem.start(",
    '"--engine", "spark"',
    "--spark-master",
    "spark_session(",
    "harness.tools",
    "kafka_libs(",  # the Kafka jars the harness resolves with Maven, and the Java oracle built on them
    "java_hashes(",
    "harness.kstatus",
    "harness.promrules",
    "harness.shellcheck",
)
HEAVY_DIRS = frozenset({"packaging", "e2e", "stress", "crash", "spark"})


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast-lane",
        action="store_true",
        help="only the tests that need no Kafka, Spark or Kubernetes control plane (make check)",
    )


def _heavy_fixture(item: pytest.Item, verdicts: dict[Any, bool]) -> bool:
    """Whether one of the fixtures ``item`` uses (directly or through others) starts a component in its own
    code: a directory's conftest.py may define such a fixture, e.g. tests/gateway's ``gateway_cluster``."""
    info = getattr(item, "_fixtureinfo", None)
    for defs in info.name2fixturedefs.values() if info is not None else ():
        for fixturedef in defs:
            func = fixturedef.func
            if func not in verdicts:
                try:
                    source = inspect.getsource(func)
                except (OSError, TypeError):  # pytest's own fixtures, defined in C or without a file
                    source = ""
                verdicts[func] = any(marker in source for marker in HEAVY_SOURCE)
            if verdicts[func]:
                return True
    return False


def _needs_heavy(item: pytest.Item, sources: dict[Path, str], verdicts: dict[Any, bool]) -> bool:
    path = Path(str(item.path))
    if HEAVY_DIRS & set(path.relative_to(Path(__file__).parent).parts[:-1]):
        return True
    if HEAVY_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    if path not in sources:
        sources[path] = path.read_text(encoding="utf-8")
    return any(marker in sources[path] for marker in HEAVY_SOURCE) or _heavy_fixture(item, verdicts)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--fast-lane"):
        return
    sources: dict[Path, str] = {}
    verdicts: dict[Any, bool] = {}
    kept, dropped = [], []
    for item in items:
        (dropped if _needs_heavy(item, sources, verdicts) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = kept


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """One real Kafka broker for the whole session (tests create their own topics)."""
    cluster = KafkaCluster(tmp_path_factory.mktemp("kafka-single"), brokers=1)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """One real Kafka broker whose client listener requires SASL/PLAIN as ``harness.kafka.SASL_USER``, for
    the session: the credential tests (tests/reliability) and the Spark source's broker tail share it."""
    cluster = KafkaCluster(tmp_path_factory.mktemp("kafka-sasl"), brokers=1, sasl=SASL_USER)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture
def kafka_cluster_factory(tmp_path: Path) -> Iterator[Callable[..., KafkaCluster]]:
    """Start an N-broker cluster (N <= 6) with one controller quorum; stopped when the test ends."""
    started: list[KafkaCluster] = []

    def make(brokers: int, broker_config: dict[str, str] | None = None) -> KafkaCluster:
        cluster = KafkaCluster(
            tmp_path / f"kafka-{len(started)}", brokers=brokers, broker_config=dict(broker_config or {})
        )
        started.append(cluster)
        return cluster.start()

    try:
        yield make
    finally:
        for cluster in started:
            cluster.stop()


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    server = MotoServer(tmp_path_factory.mktemp("moto")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_fault_proxy(moto_server: MotoServer) -> Iterator[FaultProxy]:
    """A fault-injecting S3 endpoint before the session's moto server (no faults until a test sets a plan)."""
    server = FaultProxy(moto_server.endpoint_url, FaultPlan()).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(moto_server: MotoServer) -> Iterator[tuple[str, dict[str, Any]]]:
    """A fresh bucket per test: yields (``s3://bucket``, storage options for s3fs)."""
    import s3fs

    name = f"tk-{uuid.uuid4().hex[:12]}"
    options = moto_server.storage_options()
    fs = s3fs.S3FileSystem(**options)
    fs.mkdir(name)
    try:
        yield f"s3://{name}", options
    finally:
        fs.rm(name, recursive=True)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    # Spark's own Kafka source is on the classpath so tests can read a topic through format("kafka") too,
    # and Iceberg's Spark runtime so they can read exported tables through format("iceberg").
    session = local_session(tmp_path_factory.mktemp("spark"), jars=[*connector_jars(), *runtime_jars()])
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def k8s_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A real control plane (etcd, kube-apiserver, kube-controller-manager) and the process kubelet.

    Shared by the whole session: tests work in their own namespace (``k8s_namespace``). The first use on
    a machine builds kube-apiserver and kube-controller-manager (``harness.k8s_build``).
    """
    plane = ControlPlane(tmp_path_factory.mktemp("k8s"))
    try:
        yield plane.start()
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def built_images() -> tuple[str, dict[str, str]]:
    """(engine, {repository: image}) of the Dockerfile's targets for this checkout (docker/build_images.py:
    already built by `make images` in `make test`, built here otherwise)."""
    return build_images()


@pytest.fixture
def container_mode(
    k8s_control_plane: ControlPlane, built_images: tuple[str, dict[str, str]]
) -> Iterator[str]:
    """For one test, the kubelet runs our images (tierkeeper/operator, tierkeeper/pipeline) as real
    containers from the built images instead of the checkout's processes (harness.pod_container).
    Yields the tool that runs them (podman, or docker where a Docker engine built them): a container
    status's containerID starts with ``<tool>://``."""
    table = k8s_control_plane.kubelet.images
    saved = dict(table)
    entries = container_images(*built_images)
    table.update(entries)
    try:
        yield next(iter(entries.values())).engine
    finally:
        table.clear()
        table.update(saved)


@pytest.fixture
def k8s_namespace(k8s_control_plane: ControlPlane) -> Iterator[str]:
    """A fresh namespace for one test (deleted afterwards, without waiting for the namespace controller)."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    k8s_control_plane.create_namespace(name)
    try:
        yield name
    finally:
        k8s_control_plane.request("DELETE", f"/api/v1/namespaces/{name}")
