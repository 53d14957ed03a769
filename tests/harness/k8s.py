"""A Kubernetes API emulator for tests that need an API fault a real server cannot be made to produce:
kmock's emulator on 127.0.0.1 with the project's CRDs registered. Everything else runs against the real
control plane (:mod:`harness.control_plane`); ``running_operator`` and ``wait_until`` serve both.

kmock keeps objects in memory and serves discovery, list, watch, create, patch and delete. A real
API server also fills some fields itself; :class:`TierkeeperEmulator` adds the ones the operator and
kopf rely on (names from generateName, uid, creationTimestamp, generation, resourceVersion, and the
status-subresource split), so tests exercise the same contract as on a cluster. It does not run
admission or schema validation: the operator's own validation is what tests see.

The server runs in its own thread and event loop, so tests stay synchronous and can use the official
``kubernetes`` client and ``kopf.testing.KopfRunner`` (another thread) against it at the same time.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import secrets
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import attrs
import kmock
import yaml

from harness.kafka_dist import HarnessError
from harness.paths import REPO_ROOT

CRD_DIR = REPO_ROOT / "crds"
CRD_RESOURCE = "apiextensions.k8s.io/v1/customresourcedefinitions"
# What kopf watches (TieredTopics are read by the reconcile rounds only, tierkeeper_operator.handlers).
OPERATOR_PLURALS = ("tieredbrokers",)


@attrs.define(kw_only=True)
class TierkeeperEmulator(kmock.KubernetesEmulator):
    """kmock's emulator plus the server-side metadata a real API server writes."""

    revision: int = attrs.field(default=0, init=False)
    watched: set[str] = attrs.field(factory=set, init=False)  # "group/version/plural" of every watch so far

    async def _handle(self, request: kmock.Request) -> Any:
        if request.action == kmock.action.LIST and request.params.get("watch", "").lower() in ("true", "1"):
            # The API server parses booleans leniently; the Python client sends watch=True, kmock wants
            # "true". kmock routes a request by its identity in the request log (a private list), so swap
            # it there too.
            watch_request = attrs.evolve(request, action=kmock.action.WATCH)
            self._requests[:] = [watch_request if r is request else r for r in self._requests]
            request = watch_request
        if request.action == kmock.action.WATCH and request.resource is not None:
            resource = request.resource
            self.watched.add(f"{resource.group}/{resource.version}/{resource.plural}")
        if request.resource is not None and isinstance(request.data, dict):
            self._fill_server_fields(request)
        return await super()._handle(request)

    def _has_status_subresource(self, resource: kmock.resource) -> bool:
        return resource in self.resources and "status" in self.resources[resource].subresources

    def _fill_server_fields(self, request: kmock.Request) -> None:
        # The request body is a plain dict that kmock stores after this hook: edit it in place.
        data: dict[str, Any] = request.data
        assert request.resource is not None
        if request.action == kmock.action.CREATE:
            meta = data.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + secrets.token_hex(3)
            if request.namespace and not meta.get("namespace"):
                meta["namespace"] = request.namespace
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", _now())
            meta["generation"] = 1
            meta["resourceVersion"] = self._next_revision()
        elif request.action == kmock.action.UPDATE and request.name is not None:
            if request.subresource == "status":
                for field_name in [name for name in data if name not in ("status", "metadata")]:
                    del data[field_name]
                data["metadata"] = {}
            elif request.subresource is None and self._has_status_subresource(request.resource):
                data.pop("status", None)
            meta = data.setdefault("metadata", {})
            if "spec" in data and request.subresource is None:
                key = (request.resource, request.namespace, request.name)
                current = self.objects[key].get("metadata", {}) if key in self.objects else {}
                # Approximation: a real server bumps generation only if the spec really changed.
                meta["generation"] = int(current.get("generation", 0)) + 1
            meta["resourceVersion"] = self._next_revision()

    def _next_revision(self) -> str:
        self.revision += 1
        return str(self.revision)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def load_crds(crd_dir: Path = CRD_DIR) -> list[dict[str, Any]]:
    docs = [yaml.safe_load(path.read_text(encoding="utf-8")) for path in sorted(crd_dir.glob("*.yaml"))]
    if not docs:
        raise HarnessError(
            f"no CRD files in {crd_dir} (run python -m tierkeeper_operator.crdgen --out crds/)"
        )
    return docs


def tiered_broker(broker_id: int, node_name: str, cluster: str = "local") -> dict[str, Any]:
    """A TieredBroker for a harness broker whose log dir the process kubelet serves as PVC ``data``."""
    return {
        "apiVersion": "tierkeeper.io/v1alpha1",
        "kind": "TieredBroker",
        "metadata": {"name": f"broker-{broker_id}"},
        "spec": {
            "clusterRef": {"name": cluster},
            "brokerId": broker_id,
            "logDir": {"claimName": "data", "mountPath": "/data", "path": "/data"},
            "placement": {"nodeName": node_name},
        },
    }


def register_crd(emulator: kmock.KubernetesEmulator, crd: Mapping[str, Any]) -> None:
    """Serve the CRD's resource in discovery and store the CRD object, as `kubectl apply` would."""
    spec = crd["spec"]
    names = spec["names"]
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        emulator.resources[f"{spec['group']}/{version['name']}/{names['plural']}"] = kmock.ResourceInfo(
            kind=names["kind"],
            singular=names.get("singular") or names["kind"].lower(),
            namespaced=spec["scope"] == "Namespaced",
            shortnames=names.get("shortNames", []),
            categories=names.get("categories", []),
            verbs={"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"},
            subresources=set(version.get("subresources", {})),
        )
    emulator.objects[CRD_RESOURCE, None, crd["metadata"]["name"]] = dict(crd)


@dataclass
class KubeApiServer:
    """The emulator running in a background thread; ``start()`` returns once it answers."""

    workdir: Path
    crds: Sequence[Mapping[str, Any]] = ()
    url: str = field(default="", init=False)
    errors: list[str] = field(default_factory=list, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, init=False)
    _stop: asyncio.Event | None = field(default=None, init=False)
    _ready: threading.Event = field(default_factory=threading.Event, init=False)
    _failure: BaseException | None = field(default=None, init=False)
    _emulator: TierkeeperEmulator | None = field(default=None, init=False)

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig.yaml"

    def start(self, timeout: float = 30.0) -> KubeApiServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._serve, name="kmock-k8s-api", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise HarnessError(f"kmock Kubernetes emulator did not start within {timeout}s")
        if self._failure is not None:
            raise HarnessError(
                f"kmock Kubernetes emulator failed to start: {self._failure!r}"
            ) from self._failure
        self._write_kubeconfig()
        self._check_answers()
        return self

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        except BaseException as exc:  # noqa: BLE001 - reported to the starting thread, which raises it
            self._failure = exc
            self._ready.set()
        finally:
            loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        async with TierkeeperEmulator() as emulator, kmock.Server(emulator) as server:
            self._emulator = emulator
            with warnings.catch_warnings():  # kmock 0.8 reads its bundled file with a deprecated call
                warnings.simplefilter("ignore", DeprecationWarning)
                emulator.resources.load_bundled()  # built-in kinds: namespaces, events, CRDs, jobs ...
            for crd in self.crds:
                register_crd(emulator, crd)
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()
            # Errors are answered to clients as Kubernetes Status objects; kept for failure messages.
            self.errors.extend(repr(error) for error in emulator.errors)

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "kmock", "cluster": {"server": self.url}}],
            "users": [{"name": "kmock", "user": {"token": "kmock-test-token"}}],
            "contexts": [
                {"name": "kmock", "context": {"cluster": "kmock", "user": "kmock", "namespace": "default"}}
            ],
            "current-context": "kmock",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config), encoding="utf-8")

    def _check_answers(self) -> None:
        import urllib.request

        try:
            with urllib.request.urlopen(f"{self.url}/version", timeout=10) as response:
                json.loads(response.read())
        except (OSError, ValueError) as exc:
            self.stop()
            raise HarnessError(f"kmock Kubernetes emulator at {self.url} does not answer: {exc!r}") from exc

    def stop(self, timeout: float = 30.0) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop may have closed in between
                self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise HarnessError("kmock Kubernetes emulator did not stop")
            self._thread = None

    def watched(self) -> set[str]:
        """Resources someone has opened a watch on, as "group/version/plural"."""
        return set(self._emulator.watched) if self._emulator is not None else set()

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` for this server (its own configuration, no globals)."""
        import kubernetes

        return kubernetes.config.new_client_from_config(config_file=str(self.kubeconfig))


class OperatorTarget(Protocol):
    """What ``running_operator`` needs of an API server: a kubeconfig, and which resources are watched."""

    @property
    def kubeconfig(self) -> Path: ...

    def watched(self) -> set[str]: ...


@contextlib.contextmanager
def _logging_restored() -> Iterator[None]:
    # `kopf run` configures logging process-wide (root handler and level, the asyncio logger), as a
    # process of its own would; put it back so later tests log as before.
    loggers = [logging.getLogger(), logging.getLogger("asyncio")]
    saved = [(logger, list(logger.handlers), logger.level, logger.propagate) for logger in loggers]
    try:
        yield
    finally:
        for logger, handlers, level, propagate in saved:
            logger.handlers[:] = handlers
            logger.setLevel(level)
            logger.propagate = propagate


@contextlib.contextmanager
def running_operator(
    api: OperatorTarget,
    timeout: float = 60.0,
    start_timeout: float = 30.0,
    clusters: Mapping[str, Any] | None = None,
) -> Iterator[Any]:
    """Run the Tierkeeper operator with ``kopf.testing.KopfRunner`` against ``api`` (the harness's
    :class:`~harness.control_plane.ControlPlane`, or this module's kmock server).

    The operator gets its own handler registry whose login handler is kopf's kubeconfig login; the
    runner's ``env`` points ``KUBECONFIG`` at the emulator only while the operator runs. Failures of
    the operator are not re-raised at exit: the yielded runner's ``output`` (the operator's log, complete
    after the block) and ``exception`` belong in the test's assertions.
    """
    import kopf
    from kopf.testing import KopfRunner

    from tierkeeper_operator import GROUP, VERSION
    from tierkeeper_operator.handlers import build_registry

    registry = build_registry(clusters, login=kopf.login_with_kubeconfig)
    args = ["run", "--standalone", "--all-namespaces"]
    wanted = {f"{GROUP}/{VERSION}/{plural}" for plural in OPERATOR_PLURALS}
    with (
        _logging_restored(),
        KopfRunner(
            args, registry=registry, env={"KUBECONFIG": str(api.kubeconfig)}, timeout=timeout, reraise=False
        ) as runner,
    ):
        # Ready means kopf has opened its watches (OPERATOR_PLURALS).
        if wait_until(lambda: wanted <= api.watched(), start_timeout):
            yield runner
            return
    raise HarnessError(
        f"the operator did not start watching {sorted(wanted)} within {start_timeout}s "
        f"(exception: {runner.exception!r}); its log:\n{runner.output[-5000:]}"
    )


def wait_until(probe: Callable[[], Any], timeout: float = 30.0, interval: float = 0.2) -> Any:
    """Call ``probe`` until it returns something truthy; return that, or the last value on timeout."""
    deadline = time.monotonic() + timeout
    value = probe()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = probe()
    return value
