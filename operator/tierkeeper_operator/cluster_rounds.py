"""The TieredCluster part of a round (decisions in :mod:`storage_core.reconcile.tiered_clusters`).

At the start of every full round :meth:`ClusterRounds.resolve` lists the TieredClusters and swaps the
clusters in effect (:class:`LiveClusters`, the one map every part of the operator resolves ``clusterRef``
against), so a new, edited or deleted TieredCluster takes effect without a restart. At the end,
:meth:`ClusterRounds.finish` checks Kafka with the operator's own client, folds finished bucket-check Jobs,
starts the ones due, sums what the round saw of the cluster's TieredTopics and TieredBrokers, writes each
status that changed, posts an Event when a cluster's state changes, and keeps or releases the finalizer.

The operator never reads the storage Secret: the bucket is checked by a short Job with the credentials the
copy Jobs get (``tierkeeper check-remote``), and only its one-line verdict comes back. The Kafka client
Secret of a TieredCluster is read by name (``get`` on exactly that Secret), into the client's
configuration only.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping
from typing import Any

from storage_core.adapters.kafka_features import KafkaFeatures, KafkaFeaturesError
from storage_core.api import tiered_cluster as api
from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.cluster_parts import StrimziRef
from storage_core.api.parse import Parsed, parse_spec
from storage_core.api.status import TieredBrokerStatus, TieredTopicStatus
from storage_core.errors import ConfigError, TierkeeperError
from storage_core.reconcile import tiered_clusters as decide
from storage_core.reconcile.conditions import Health, rfc3339
from tierkeeper_operator.cluster_objects import sync_gateway, sync_strimzi_brokers
from tierkeeper_operator.job_kinds import JobKind, bucket_check_job, kind_of
from tierkeeper_operator.jobs import ANNOTATION_RECORDED, LABEL_CLUSTER, Owner, job_state, termination_message
from tierkeeper_operator.kube import Kube, KubeError
from tierkeeper_operator.live_clusters import LiveClusters
from tierkeeper_operator.settings import GatewaySettings
from tierkeeper_operator.status_patch import status_patch
from tierkeeper_operator.strimzi_brokers import bootstrap_servers
from tierkeeper_operator.writes import EventSink

log = logging.getLogger("tierkeeper.operator")


def _status(obj: Mapping[str, Any]) -> api.TieredClusterStatus:
    try:
        return api.TieredClusterStatus.model_validate(obj.get("status") or {})
    except ValueError:
        return api.TieredClusterStatus()  # a status another writer broke is rebuilt


class ClusterRounds:
    def __init__(
        self,
        kube: Kube,
        files: Mapping[str, KafkaClusterConfig],
        live: LiveClusters,
        clock: Callable[[], datetime.datetime],
        event: EventSink,
        create_job: Callable[[dict[str, Any]], bool],
        gateway_settings: GatewaySettings | None = None,
    ) -> None:
        self.kube = kube
        self.gateway_settings = gateway_settings
        self.files = dict(files)
        self.live = live
        self.clock = clock
        self._event = event
        self._create_job = create_job
        self.directory = decide.directory([], self.files)
        self.resolved = False
        """True once a round has listed the TieredClusters (before, a clusterRef may name one unseen)."""
        self._objects: dict[str, decide.ClusterObject] = {}
        self._raw: dict[str, dict[str, Any]] = {}
        self._strimzi: dict[str, api.StrimziSummary] = {}
        self._strimzi_problems: dict[str, str] = {}

    # ---- start of a full round ---------------------------------------------------------------------
    def resolve(self) -> decide.Directory:
        """List the TieredClusters and put the clusters in effect into :attr:`live`."""
        objects: dict[str, decide.ClusterObject] = {}
        raw: dict[str, dict[str, Any]] = {}
        try:
            listed = self.kube.list_resources(api.PLURAL)
        except KubeError as exc:
            # E.g. 403 from RBAC older than the operator, or the CRD not installed yet: the file entries and
            # the TieredClusters last listed stay in effect, and the rest of the round goes on.
            log.warning("cannot list TieredClusters (the last ones listed stay in effect): %s", exc)
            return self.directory
        self._strimzi_problems = {}
        for obj in listed:
            meta = obj["metadata"]
            parsed = parse_spec(api.TieredClusterSpec, obj.get("spec") or {})
            strimzi = parsed.value.strimzi if parsed.value is not None else None
            generation = meta.get("generation")
            item = decide.ClusterObject(
                namespace=meta["namespace"],
                name=meta["name"],
                generation=generation if isinstance(generation, int) else None,
                created=str(meta.get("creationTimestamp") or ""),
                spec=parsed,
                status=_status(obj),
                deleting=bool(meta.get("deletionTimestamp")),
                strimzi_bootstrap=None
                if strimzi is None
                else self.strimzi_bootstrap(meta["namespace"], meta["name"], strimzi),
            )
            objects[item.key], raw[item.key] = item, obj
        self._objects, self._raw = objects, raw
        self.directory = decide.directory(objects.values(), self.files)
        self._strimzi = {}
        for key, item in objects.items():
            spec = item.spec.value
            if spec is None or spec.strimzi is None:
                continue
            problem = self._strimzi_problems.get(key)
            refused = self.directory.refused.get(key)
            if refused is not None and refused.reason == "WaitingForBootstrap" and problem:
                self.directory.refused[key] = Health(
                    False, refused.reason, f"Strimzi {problem}", reconciling=True
                )
            if refused is None and not item.deleting:
                self._strimzi[key] = self._sync_strimzi(item, spec.strimzi)
            elif problem:
                self._strimzi[key] = api.StrimziSummary(kafka=spec.strimzi.kafka, problems=[problem])
        self.live.replace(self.directory.clusters)
        self.resolved = True
        return self.directory

    def strimzi_bootstrap(self, namespace: str, name: str, ref: StrimziRef) -> str | None:
        """The bootstrap address of ``ref``'s listener from the Strimzi Kafka's ``status.listeners`` (None:
        not known yet; why is kept for the TieredCluster's status)."""
        key = f"{namespace}/{name}"
        try:
            kafka = self.kube.get_strimzi_kafka(namespace, ref.kafka)
        except KubeError as exc:  # e.g. Strimzi's CRDs not installed
            self._strimzi_problems[key] = f"Kafka {ref.kafka}: cannot read it: HTTP {exc.status}"
            return None
        if kafka is None:
            self._strimzi_problems[key] = f"Kafka {ref.kafka} not found in namespace {namespace}"
            return None
        address, problem = bootstrap_servers(kafka, ref.listener)
        if problem:
            self._strimzi_problems[key] = problem
        return address

    def _sync_strimzi(self, item: decide.ClusterObject, ref: StrimziRef) -> api.StrimziSummary:
        """Keep a TieredBroker for every broker of the Strimzi cluster (a user's own TieredBroker wins)."""
        owner = Owner("TieredCluster", item.name, item.namespace, self._raw[item.key]["metadata"]["uid"])
        try:
            state = sync_strimzi_brokers(self.kube, ref, item.namespace, owner)
        except KubeError as exc:
            return api.StrimziSummary(kafka=ref.kafka, problems=[f"TieredBrokers not kept: {exc}"[:300]])
        return api.StrimziSummary(
            kafka=ref.kafka,
            brokers=sorted(state.view.brokers),
            user_brokers=sorted(state.changes.users),
            problems=list(state.problems),
        )

    def _gateway(
        self, obj: decide.ClusterObject, cluster: KafkaClusterConfig, kafka: api.KafkaCheck | None
    ) -> decide.GatewayOutlook | None:
        """Keep the gateway's objects (``spec.gateway.enabled``; removed once it is turned off) and say
        how it stands. Nothing is asked of the API server for a cluster that never had a gateway."""
        spec = obj.spec.value
        if spec is None or (not spec.gateway.enabled and obj.status.gateway is None):
            return None
        owner = Owner("TieredCluster", obj.name, obj.namespace, self._raw[obj.key]["metadata"]["uid"])
        brokers = kafka.broker_ids if kafka is not None else []
        try:
            outcome = sync_gateway(self.kube, cluster, spec.gateway, brokers, owner, self.gateway_settings)
        except KubeError as exc:
            return decide.GatewayOutlook(problem=f"{exc}"[:300], lasting=False)
        if not spec.gateway.enabled:
            return None
        state = api.GatewayState(ready_replicas=outcome.ready_replicas, bootstrap=outcome.bootstrap)
        return decide.GatewayOutlook(state=state, problem=outcome.problem)

    def secret_for(self, name: str) -> dict[str, str] | None:
        """The clientConfigSecretRef properties of the TieredCluster in effect under ``name``, read by name
        from its namespace; None for a file entry (its Secret is a directory mounted into the pod)."""
        if name in self.directory.files or not self.directory.namespaces.get(name):
            return None
        cluster = self.directory.clusters[name]
        if cluster.client_config_secret_ref is None:
            return None
        namespace, secret = sorted(self.directory.namespaces[name])[0], cluster.client_config_secret_ref.name
        try:
            return self.kube.secret_data(namespace, secret)
        except KubeError as exc:
            hint = ""
            if exc.status == 403:
                hint = " (the operator may `get` only the Secrets it is granted by name: docs/operator.md)"
            raise ConfigError(
                f"cluster {name}: cannot read clientConfigSecretRef Secret {namespace}/{secret}: "
                f"HTTP {exc.status}{hint}"
            ) from None

    # ---- end of a full round -----------------------------------------------------------------------
    def finish(
        self,
        jobs: list[dict[str, Any]],
        topic_specs: Mapping[str, Parsed[Any]],
        broker_specs: Mapping[str, Parsed[Any]],
        topic_status: Mapping[str, TieredTopicStatus],
        broker_status: Mapping[str, TieredBrokerStatus],
        kafka_client: Callable[[str], Any],
    ) -> list[str]:
        """Checks, statuses, Events and finalizers of every TieredCluster; returns the Jobs created."""
        now = self.clock()
        verdicts, running = self._bucket_jobs(jobs)
        members = self._members(topic_specs, broker_specs, topic_status, broker_status)
        kafka_seen: dict[str, api.KafkaCheck] = {}
        created = []
        for key, obj in self._objects.items():
            in_effect = key not in self.directory.refused
            counted = members.get(key, decide.Members())
            kafka = obj.status.kafka
            bucket = verdicts.get(key, obj.status.bucket)
            cluster = self.directory.clusters.get(obj.name) if in_effect else None
            bucket_key = decide.bucket_key(cluster) if cluster is not None else None
            if cluster is not None:
                if obj.name not in kafka_seen:
                    kafka_seen[obj.name] = self._kafka_check(cluster, kafka_client, obj.status.kafka, now)
                kafka = kafka_seen[obj.name]
                if not obj.deleting and bucket_key is not None:
                    due = decide.bucket_check_due(bucket, bucket_key, key in running, now)
                    if due:
                        bucket, job = self._start_bucket_check(obj, cluster, bucket, bucket_key, now)
                        if job:
                            created.append(job)
            gateway = self._gateway(obj, cluster, kafka) if cluster is not None else None
            verdict = decide.health(obj, self.directory, kafka, bucket, counted, bucket_key, gateway)
            state = gateway.state if gateway is not None else None
            strimzi = self._strimzi.get(key)
            status = decide.status(obj, verdict, kafka, bucket, counted, state, now, strimzi)
            self._finalizer(obj, counted)  # first: the status patch below needs no resourceVersion
            self._write(obj, status, verdict)
        return created

    def _members(
        self,
        topic_specs: Mapping[str, Parsed[Any]],
        broker_specs: Mapping[str, Parsed[Any]],
        topic_status: Mapping[str, TieredTopicStatus],
        broker_status: Mapping[str, TieredBrokerStatus],
    ) -> dict[str, decide.Members]:
        counts: dict[str, list[int]] = {}
        for kind, specs in (("topic", topic_specs), ("broker", broker_specs)):
            for key, parsed in specs.items():
                spec = parsed.value
                if spec is None:
                    continue
                cluster_key = f"{key.split('/', 1)[0]}/{spec.cluster_ref.name}"
                if cluster_key not in self._objects:
                    continue
                row = counts.setdefault(cluster_key, [0, 0, 0, 0])
                if kind == "broker":
                    row[1] += 1
                    continue
                row[0] += 1
                status = topic_status.get(key)
                if status is not None:
                    row[2] += status.remote.bytes if status.remote else 0
                    row[3] += status.copy_lag.bytes if status.copy_lag else 0
        return {key: decide.Members(*row) for key, row in counts.items()}

    def _kafka_check(
        self,
        cluster: KafkaClusterConfig,
        kafka_client: Callable[[str], Any],
        previous: api.KafkaCheck | None,
        now: datetime.datetime,
    ) -> api.KafkaCheck:
        try:
            client = kafka_client(cluster.name)
            cluster_id, controller, brokers = client.cluster_summary()
            try:
                features: KafkaFeatures | None = client.features()
            except KafkaFeaturesError as exc:
                # The version is for people to read: the cluster answered its metadata request, so it is
                # reachable even where this raw connection is not (a keystore only librdkafka reads).
                log.info("cluster %s: Kafka version unknown: %s", cluster.name, exc)
                features = None
            seen = api.KafkaCheck(
                reachable=True,
                bootstrap_servers=cluster.bootstrap_servers,
                cluster_id=cluster_id,
                controller_id=controller,
                broker_ids=brokers,
                metadata_version=features.metadata_version if features else None,
                broker_release=features.broker_release if features else None,
            )
        except TierkeeperError as exc:
            seen = api.KafkaCheck(
                reachable=False, bootstrap_servers=cluster.bootstrap_servers, message=str(exc)
            )
        # checkedAt is when this answer was first seen: an unchanged answer writes no new status.
        if previous is not None and previous.model_copy(update={"checked_at": None}) == seen:
            return previous
        return seen.model_copy(update={"checked_at": rfc3339(now)})

    def _bucket_jobs(self, jobs: list[dict[str, Any]]) -> tuple[dict[str, api.BucketCheck], set[str]]:
        """Verdicts of finished, unrecorded bucket-check Jobs (by TieredCluster key), and the keys whose
        check still runs."""
        verdicts: dict[str, api.BucketCheck] = {}
        running: set[str] = set()
        for job in jobs:
            meta = job["metadata"]
            labels = meta.get("labels") or {}
            if kind_of(job) != JobKind.BUCKET_CHECK:
                continue
            key = f"{meta['namespace']}/{labels.get(LABEL_CLUSTER, '')}"
            state = job_state(job)
            if state == "Running":
                running.add(key)
                continue
            if (meta.get("annotations") or {}).get(ANNOTATION_RECORDED) == "true":
                continue
            obj = self._objects.get(key)
            if obj is not None and obj.status.bucket is not None and obj.status.bucket.job == meta["name"]:
                message = termination_message(self.kube.job_pods(meta["namespace"], meta["name"]))
                reachable, text = decide.decode_bucket_check(message, meta["name"], state)
                verdicts[key] = obj.status.bucket.model_copy(
                    update={"reachable": reachable, "message": text, "checked_at": rfc3339(self.clock())}
                )
            self.kube.annotate_job(meta["namespace"], meta["name"], {ANNOTATION_RECORDED: "true"})
        return verdicts, running

    def _start_bucket_check(
        self,
        obj: decide.ClusterObject,
        cluster: KafkaClusterConfig,
        bucket: api.BucketCheck | None,
        bucket_key: str,
        now: datetime.datetime,
    ) -> tuple[api.BucketCheck | None, str | None]:
        raw = self._raw[obj.key]["metadata"]
        owner = Owner("TieredCluster", obj.name, obj.namespace, raw["uid"])
        job = bucket_check_job(cluster, owner, f"{bucket_key}/{rfc3339(now)}")
        name = job["metadata"]["name"]
        try:
            self._create_job(job)
        except KubeError as exc:
            log.warning("cannot start the bucket check of %s: %s", obj.key, exc)
            return bucket, None
        if bucket is None or bucket.spec_key != bucket_key:
            # New settings: the old verdict says nothing about them.
            return api.BucketCheck(url=cluster.remote.url, job=name, spec_key=bucket_key), name
        return bucket.model_copy(update={"job": name}), name  # a repeat keeps the verdict until it ends

    def _write(self, obj: decide.ClusterObject, status: api.TieredClusterStatus, verdict: Health) -> None:
        raw = self._raw[obj.key]
        new = status.model_dump(by_alias=True, mode="json", exclude_none=True)
        patch = status_patch(raw.get("status") or {}, new)  # a field gone (the gateway turned off): null
        if not patch:
            return
        try:
            self.kube.patch_status(api.PLURAL, obj.namespace, obj.name, patch)
        except KubeError as exc:
            if exc.status != 404:  # deleted during the round
                raise
            return
        before = next((c for c in obj.status.conditions if c.type == "Ready"), None)
        if before is None or before.reason != verdict.reason:
            warning = verdict.stalled or verdict.warning
            self._event(
                raw, "TieredCluster", "Warning" if warning else "Normal", verdict.reason, verdict.message
            )

    def _finalizer(self, obj: decide.ClusterObject, members: decide.Members) -> None:
        raw = self._raw[obj.key]
        finalizers = list(raw["metadata"].get("finalizers") or [])
        if not obj.deleting and decide.FINALIZER not in finalizers:
            finalizers.append(decide.FINALIZER)
        elif decide.may_release(obj, members) and decide.FINALIZER in finalizers:
            finalizers.remove(decide.FINALIZER)
            self._event(raw, "TieredCluster", "Normal", "Released", "no TieredTopic or TieredBroker names it")
        else:
            return
        try:
            self.kube.set_finalizers(api.PLURAL, raw, finalizers)
        except KubeError as exc:
            if exc.status not in (404, 409):
                raise
