"""A Strimzi cluster's brokers as TieredBrokers: pure functions from the Strimzi objects the operator
lists (the ``Kafka``, its ``KafkaNodePool``\\ s, the broker pods) to the bootstrap address and to what to
create, update and delete among the TieredBrokers of a TieredCluster with ``spec.strimzi``.

Strimzi's conventions, as its cluster operator applies them (``kafka.strimzi.io/v1``):

- broker pods are ``<kafka>-<pool>-<node id>``, labelled ``strimzi.io/cluster`` and ``strimzi.io/pool-name``;
  a pool's node ids are its ``status.nodeIds``, its roles ``spec.roles`` (``broker``, ``controller``);
- a data volume is ``data`` (``persistent-claim`` storage) mounted at ``/var/lib/kafka/data``, or
  ``data-<volume id>`` (a ``jbod`` volume) at ``/var/lib/kafka/data-<volume id>``; its claim is
  ``<volume name>-<pod name>``, and the broker's log dir on it is ``<mount path>/kafka-log<node id>``;
- a listener's bootstrap address is ``status.listeners[name].bootstrapServers`` of the ``Kafka``.

A TieredBroker is named after the broker's pod and owned by the TieredCluster (controller reference), so
it goes with it. A TieredBroker someone wrote for the same cluster and broker id wins: none is kept for
that broker, and one the operator kept before is deleted. Only TieredBrokers the TieredCluster owns are
ever updated or deleted. A broker with several persistent JBOD volumes gets one TieredBroker with a log
dir per volume (``logDir`` the lowest volume id, ``extraLogDirs`` the others); a broker with ephemeral
storage, or a JBOD list with an ephemeral volume (partitions Kafka keeps there could be neither copied
nor rebuilt: no claim a Job could mount), gets none and a problem line instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from storage_core.api import API_VERSION
from storage_core.api.cluster_parts import StrimziRef
from storage_core.api.resources import TieredBrokerSpec
from tierkeeper_operator.jobs import LABEL_CLUSTER, LABEL_MANAGED_BY, MANAGED_BY, Owner

STRIMZI_GROUP = "kafka.strimzi.io"
STRIMZI_VERSION = "v1"
LABEL_STRIMZI_CLUSTER = "strimzi.io/cluster"
LABEL_STRIMZI_POOL = "strimzi.io/pool-name"
LABEL_STRIMZI_BROKER = "strimzi.io/broker-role"
LABEL_POOL = "tierkeeper.io/strimzi-pool"
DATA_ROOT = "/var/lib/kafka"
KAFKA_CONTAINER = "kafka"


def broker_pod_selector(kafka: str) -> str:
    """The label selector of a Strimzi cluster's broker pods."""
    return f"{LABEL_STRIMZI_CLUSTER}={kafka},{LABEL_STRIMZI_BROKER}=true"


def node_pool_selector(kafka: str) -> str:
    return f"{LABEL_STRIMZI_CLUSTER}={kafka}"


@dataclass(frozen=True)
class StrimziView:
    """What the Strimzi objects say: the bootstrap address and a TieredBroker spec per usable broker."""

    cluster_name: str
    """The TieredCluster (what the TieredBrokers' clusterRef names)."""
    bootstrap_servers: str | None
    brokers: dict[int, TieredBrokerSpec]
    pods: dict[int, str]
    """Broker id -> the pod (and TieredBroker) name."""
    pools: dict[int, str]
    problems: list[str] = field(default_factory=list)
    """One line each: what keeps the address or a broker from being known."""


@dataclass(frozen=True)
class BrokerChanges:
    """What to do with the TieredBrokers of the namespace (``create``/``update``: full manifests)."""

    create: list[dict[str, Any]] = field(default_factory=list)
    update: list[dict[str, Any]] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    users: list[int] = field(default_factory=list)
    """Broker ids left to a TieredBroker someone wrote."""
    problems: list[str] = field(default_factory=list)


def bootstrap_servers(kafka: Mapping[str, Any], listener: str) -> tuple[str | None, str | None]:
    """(address, None) from the Kafka's status, or (None, why not)."""
    name = (kafka.get("metadata") or {}).get("name", "?")
    listeners = (kafka.get("status") or {}).get("listeners") or []
    for entry in listeners:
        if entry.get("name") == listener:
            address = entry.get("bootstrapServers")
            if not address and entry.get("addresses"):
                address = ",".join(f"{a['host']}:{a['port']}" for a in entry["addresses"])
            if address:
                return str(address), None
            return None, f"Kafka {name}: listener {listener!r} has no bootstrap address in status yet"
    known = ", ".join(sorted(str(e.get("name")) for e in listeners)) or "none yet"
    return None, f"Kafka {name}: no listener {listener!r} in status.listeners (listeners: {known})"


def _is_broker_pool(pool: Mapping[str, Any]) -> bool:
    roles = (pool.get("spec") or {}).get("roles") or (pool.get("status") or {}).get("roles") or []
    return "broker" in roles


def _claim_volumes(pool: Mapping[str, Any]) -> tuple[list[str], str | None]:
    """The pool's persistent data volume names (``data`` or ``data-<id>``), or a reason there are none."""
    storage = (pool.get("spec") or {}).get("storage") or {}
    kind = storage.get("type")
    if kind == "persistent-claim":
        return ["data"], None
    if kind == "jbod":
        volumes = storage.get("volumes") or []
        other = sorted(str(v.get("id")) for v in volumes if v.get("type") != "persistent-claim")
        if other or not volumes:
            return [], (
                f"JBOD volume(s) {', '.join(other)} are not persistent-claim: the partitions Kafka keeps "
                "there have no claim a copy Job could mount"
                if other
                else "JBOD storage without volumes"
            )
        return [f"data-{v['id']}" for v in sorted(volumes, key=lambda v: int(v["id"]))], None
    return [], f"storage type {kind or 'unset'!r} has no claim a copy Job could mount"


def _pod_claims(pod: Mapping[str, Any] | None) -> dict[str, tuple[str, str | None]]:
    """Volume name -> (claim, mount path in the kafka container) as the pod has them."""
    if not pod:
        return {}
    spec = pod.get("spec") or {}
    mounts = {
        m["name"]: m["mountPath"]
        for c in spec.get("containers") or []
        if c.get("name") == KAFKA_CONTAINER
        for m in c.get("volumeMounts") or []
    }
    return {
        v["name"]: (v["persistentVolumeClaim"]["claimName"], mounts.get(v["name"]))
        for v in spec.get("volumes") or []
        if "persistentVolumeClaim" in v
    }


def strimzi_view(
    ref: StrimziRef,
    cluster_name: str,
    kafka: Mapping[str, Any] | None,
    node_pools: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
) -> StrimziView:
    """The brokers of ``ref``'s Kafka as TieredBroker specs of the TieredCluster ``cluster_name``."""
    if kafka is None:
        return StrimziView(
            cluster_name, None, {}, {}, {}, [f"Strimzi Kafka {ref.kafka!r} not found in the namespace"]
        )
    address, why_no_address = bootstrap_servers(kafka, ref.listener)
    problems = [why_no_address] if why_no_address else []
    by_name = {(p.get("metadata") or {}).get("name"): p for p in pods}
    brokers: dict[int, TieredBrokerSpec] = {}
    names: dict[int, str] = {}
    pool_of: dict[int, str] = {}
    for pool in sorted(node_pools, key=lambda p: str(p["metadata"]["name"])):
        pool_name = str(pool["metadata"]["name"])
        if (pool["metadata"].get("labels") or {}).get(LABEL_STRIMZI_CLUSTER) != ref.kafka:
            continue
        if not _is_broker_pool(pool):
            continue
        node_ids = (pool.get("status") or {}).get("nodeIds")
        if node_ids is None:
            problems.append(
                f"KafkaNodePool {pool_name}: no status.nodeIds yet (Strimzi has not reconciled it)"
            )
            continue
        volumes, why_not = _claim_volumes(pool)
        for node in sorted(int(n) for n in node_ids):
            pod_name = f"{ref.kafka}-{pool_name}-{node}"
            if why_not:
                problems.append(f"broker {node} (pool {pool_name}): {why_not}")
                continue
            claims = _pod_claims(by_name.get(pod_name))
            locations = []
            for volume in volumes:
                claim, mount = claims.get(volume, (None, None))
                mount = mount or f"{DATA_ROOT}/{volume}"
                locations.append(
                    {
                        "claimName": claim or f"{volume}-{pod_name}",
                        "mountPath": mount,
                        "path": f"{mount}/kafka-log{node}",
                    }
                )
            spec: dict[str, Any] = {
                "clusterRef": {"name": cluster_name},
                "brokerId": node,
                "logDir": locations[0],
                "placement": {"podName": pod_name},
            }
            if locations[1:]:
                spec["extraLogDirs"] = locations[1:]
            brokers[node] = TieredBrokerSpec.model_validate(spec)
            names[node] = pod_name
            pool_of[node] = pool_name
    return StrimziView(cluster_name, address, brokers, names, pool_of, problems)


def _owned_by(obj: Mapping[str, Any], owner: Owner) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == owner.uid and r.get("controller") for r in refs)


def _spec_of(obj: Mapping[str, Any]) -> TieredBrokerSpec | None:
    try:
        return TieredBrokerSpec.model_validate(obj.get("spec") or {})
    except ValidationError:
        return None


# The fields the operator sets on the TieredBrokers it keeps; the rest (rebuild, replicaFetchers, paused)
# is the user's to set on them and survives (server-side apply leaves other managers' fields alone).
_KEPT = {"cluster_ref", "broker_id", "log_dir", "extra_log_dirs", "placement"}


def broker_manifest(
    name: str, namespace: str, spec: TieredBrokerSpec, owner: Owner, pool: str
) -> dict[str, Any]:
    body = spec.model_dump(mode="json", by_alias=True, include=_KEPT, exclude_none=True)
    if not body["extraLogDirs"]:
        # Left out rather than applied empty: a volume removed later drops the field the same way
        # (server-side apply removes what this manager applied before and no longer sends).
        del body["extraLogDirs"]
    return {
        "apiVersion": API_VERSION,
        "kind": "TieredBroker",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_CLUSTER: spec.cluster_ref.name, LABEL_POOL: pool},
            "ownerReferences": [owner.reference()],
        },
        "spec": body,
    }


def broker_changes(
    view: StrimziView, existing: Iterable[Mapping[str, Any]], owner: Owner, namespace: str
) -> BrokerChanges:
    """Compare what Strimzi says with the namespace's TieredBrokers (all of them: the user's too)."""
    ours: dict[str, Mapping[str, Any]] = {}
    users: dict[int, str] = {}
    taken: dict[str, Mapping[str, Any]] = {}
    cluster = view.cluster_name
    for obj in existing:
        name = str(obj["metadata"]["name"])
        taken[name] = obj
        if _owned_by(obj, owner):
            ours[name] = obj
            continue
        spec = _spec_of(obj)
        if spec is not None and spec.cluster_ref.name == cluster:
            users.setdefault(spec.broker_id, name)
    changes = BrokerChanges(users=sorted(set(view.brokers) & set(users)))
    wanted: set[str] = set()
    for broker, spec in sorted(view.brokers.items()):
        if broker in users:
            continue
        name = view.pods[broker]
        if name in taken and name not in ours:
            changes.problems.append(
                f"broker {broker}: TieredBroker {name} exists and is not this TieredCluster's; it is left "
                "alone"
            )
            continue
        wanted.add(name)
        manifest = broker_manifest(name, namespace, spec, owner, view.pools[broker])
        if name not in ours:
            changes.create.append(manifest)
            continue
        current = _spec_of(ours[name])
        kept = spec.model_dump(include=_KEPT)
        if current is None or current.model_dump(include=_KEPT) != kept:
            changes.update.append(manifest)
    changes.delete.extend(sorted(set(ours) - wanted))
    return changes
