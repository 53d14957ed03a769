"""The Kafka cluster configuration: defined once per cluster, referenced by name from every TieredTopic and
TieredBroker (10,000 topics must not carry 10,000 copies of bootstrap servers and bucket settings).

Two forms, one set of settings (:class:`ClusterSettings`): the TieredCluster custom resource
(``tiered_cluster.py``; metadata.name is the name) and the older file form the operator reads with
``--cluster FILE`` and ``tierkeeper standalone`` with ``--cluster FILE``. Both resolve into
:class:`KafkaClusterConfig`, the form the rest of the code uses.
Secrets are referenced by name and resolved in the namespace of the Job that needs them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from storage_core import __version__
from storage_core.api.fields import (
    BootstrapServers,
    LabelSafeName,
    NonEmptyStr,
    ObjectName,
    RemoteUrl,
    ThreadCount,
)
from storage_core.api.rules import ApiModel
from storage_core.api.trim_hold import TrimHold

PIPELINE_REPOSITORY = "tierkeeper/pipeline"
"""The Jobs' image, one name everywhere: the Dockerfile's ``pipeline`` target as ``make images`` tags it, the
chart's ``pipelineImage``, the examples (tests/k8s/test_k8s_chart_knobs.py holds them to it)."""
DEFAULT_IMAGE = f"{PIPELINE_REPOSITORY}:{__version__}"

_CREDENTIAL_WORDS = ("password", "secret", "token", "credential", "jaas", "private", "signature")
_CREDENTIAL_PARTS = {"key", "keys", "sas"}


def credential_like(name: str, *, strict: bool = False) -> bool:
    """Whether an option or property name looks like it holds a credential. Such values go to Jobs
    through Secrets only: a cluster configuration refuses them inline, the CLI refuses them as flags.

    ``strict``: also any name merely containing ``key`` or ``sas`` (``ssl.keystore.location``,
    ``sasl.mechanism``), for deciding what a command never echoes, where a false alarm only hides a harmless
    option; refusing those inline would refuse settings that are not secrets."""
    lowered = name.lower()
    parts = set(lowered.replace("_", ".").replace("-", ".").split("."))
    if strict and ("key" in lowered or "sas" in lowered):
        return True
    return any(word in lowered for word in _CREDENTIAL_WORDS) or bool(_CREDENTIAL_PARTS & parts)


def _credential_keys(values: dict[str, Any], prefix: str = "") -> list[str]:
    found = []
    for key, value in values.items():
        if credential_like(str(key)):
            found.append(f"{prefix}{key}")
        elif isinstance(value, dict):  # e.g. client_kwargs: {aws_secret_access_key: ...}
            found += _credential_keys(value, f"{prefix}{key}.")
    return found


def without_credentials(where: str, instead: str) -> AfterValidator:
    """The check of a field of settings written inline (in the clear): a ``ValueError`` naming every key
    (nested ones too) that looks like a credential, which goes by reference (``instead``) to a Secret."""

    def check(values: dict[str, Any]) -> dict[str, Any]:
        found = sorted(_credential_keys(values))
        if found:
            raise ValueError(f"{where} {', '.join(found)} look like credentials: put them in {instead}")
        return values

    return AfterValidator(check)


StorageOptions = Annotated[dict[str, Any], without_credentials("storageOptions", "storageOptionsSecretRef")]
ClientConfig = Annotated[dict[str, str], without_credentials("clientConfig", "clientConfigSecretRef")]


class SecretRef(ApiModel):
    """A Secret in the namespace where it is used (the broker's namespace for Jobs)."""

    name: ObjectName = Field(description="Name of the Secret.")


def env_secret_ref(of_jobs: str) -> Any:
    """An optional :class:`SecretRef` field: a Secret the Jobs get as ``envFrom`` (``of_jobs``: which Jobs,
    and what the variables are for)."""
    return Field(default=None, description=f"Secret whose keys become environment variables of {of_jobs}")


class RemoteStorage(ApiModel):
    """The object store holding the remote tier, addressed as an fsspec URL."""

    url: RemoteUrl = Field(
        description="fsspec URL of the remote tier's root, e.g. s3://bucket/prefix, gs://bucket/prefix, "
        "file:///mnt/tier. Every topic of the cluster lives under it (topic name and id in the path)."
    )
    storage_options: StorageOptions = Field(
        default_factory=dict,
        description="Non-secret fsspec storage options, e.g. client_kwargs: {endpoint_url: ...}.",
    )
    storage_options_secret_ref: SecretRef | None = env_secret_ref(
        "the Jobs, where the storage provider reads its credentials (e.g. AWS_ACCESS_KEY_ID, "
        "AWS_SECRET_ACCESS_KEY); omit to use the pods' ambient identity."
    )


class ResourceQuantities(ApiModel):
    """Kubernetes resource quantities, e.g. cpu: 500m, memory: 512Mi."""

    cpu: str | None = Field(default=None, description="CPU, e.g. 500m.")
    memory: str | None = Field(default=None, description="Memory, e.g. 512Mi.")
    ephemeral_storage: str | None = Field(
        default=None,
        alias="ephemeral-storage",
        description="Local scratch space (the Job's /tmp, its logs), e.g. 2Gi.",
    )


def quantities_field(description: str, **default: str) -> Any:
    """A :class:`ResourceQuantities` field (requests or limits) whose default is ``default``."""
    return Field(default_factory=lambda: ResourceQuantities(**default), description=description)


class JobResources(ApiModel):
    requests: ResourceQuantities = quantities_field(
        "What the scheduler reserves for a Job's pod.", cpu="250m", memory="256Mi"
    )
    limits: ResourceQuantities = quantities_field("Upper bounds for a Job's pod.", memory="1Gi")


class Toleration(ApiModel):
    """A Kubernetes toleration for the Jobs' pods (brokers often run on tainted nodes)."""

    key: str | None = Field(
        default=None, description="Taint key; omit with operator Exists to match every taint."
    )
    operator: Literal["Exists", "Equal"] = Field(default="Equal", description="How the value is matched.")
    value: str | None = Field(default=None, description="Taint value (operator Equal).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to tolerate; omit for every effect."
    )
    toleration_seconds: int | None = Field(
        default=None,
        ge=0,
        description="NoExecute only: how long the pod stays bound after the taint appears.",
    )

    @model_validator(mode="after")
    def _as_kubernetes_accepts(self) -> Toleration:
        # Checked here so a bad toleration fails at the operator's start, not at every Job creation.
        if self.operator == "Exists" and self.value:
            raise ValueError("a toleration with operator Exists takes no value")
        if not self.key and self.operator != "Exists":
            raise ValueError("a toleration without a key must use operator Exists")
        return self


class JobDefaults(ApiModel):
    """How the operator's copy and cleanup Jobs run on Kubernetes (standalone mode ignores it)."""

    image: NonEmptyStr = Field(default=DEFAULT_IMAGE, description="Container image with `tierkeeper`.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        default="IfNotPresent", description="Pull policy of the Jobs' container."
    )
    service_account_name: ObjectName | None = Field(
        default=None, description="ServiceAccount of the Jobs' pods; omit for the namespace default."
    )
    ttl_seconds_after_finished: int = Field(
        default=3600, ge=0, description="Seconds a finished Job (and its pod) stays for inspection."
    )
    backoff_limit: int = Field(default=1, ge=0, le=10, description="Retries of a failed Job pod.")
    active_deadline_seconds: int = Field(
        default=3600, ge=60, description="A Job running longer is stopped and counts as failed."
    )
    resources: JobResources = Field(default_factory=JobResources, description="Resources of a Job's pod.")
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        description="Node labels for cleanup and delete Jobs. Copy and rebuild Jobs ignore it: they run on "
        "the node of the broker whose volume they mount.",
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, description="Tolerations of every Job's pod, e.g. for tainted broker nodes."
    )
    priority_class_name: ObjectName | None = Field(
        default=None, description="PriorityClass of every Job's pod; omit for the cluster default."
    )
    pod_labels: dict[str, str] = Field(
        default_factory=dict,
        description="Extra labels of every Job's pod (the operator's own labels win on a clash).",
    )
    pod_annotations: dict[str, str] = Field(
        default_factory=dict,
        description='Annotations of every Job\'s pod, e.g. sidecar.istio.io/inject: "false" (a service-mesh '
        "sidecar that never exits keeps a Job from ever finishing).",
    )
    tmp_size_limit: NonEmptyStr | None = Field(
        default=None,
        description="sizeLimit of the Jobs' /tmp (an emptyDir), e.g. 1Gi; omit for no limit. Spark cleanups "
        "spill there.",
    )
    copy_parallelism: ThreadCount = Field(default=4, description="Partitions one copy Job copies at once.")
    max_bytes_per_second: int | None = Field(
        default=None, ge=1, description="Cap on the bytes a copy Job reads and ships per second."
    )
    cleanup_engine: Literal["local", "spark"] = Field(
        default="local",
        description="How cleanup Jobs run: `local` in the Job's process, `spark` a Spark task per partition.",
    )
    spark_master: NonEmptyStr | None = Field(
        default=None,
        description="Spark master of export Jobs and of cleanup Jobs with cleanupEngine spark (default: "
        "local[*] in the Job's pod), e.g. k8s://https://kubernetes.default.svc or spark://host:7077.",
    )
    spark_conf: dict[str, str] = Field(
        default_factory=dict,
        description="Spark settings of export Jobs and of cleanup Jobs with cleanupEngine spark "
        "(`--spark-conf KEY=VALUE` each); not for secrets (they are Job arguments).",
    )


class ClusterSettings(ApiModel):
    """What a Kafka cluster's configuration says besides its name and bootstrap address: written once, shared
    by the file form (:class:`KafkaClusterConfig`) and the TieredCluster resource
    (:class:`storage_core.api.tiered_cluster.TieredClusterSpec`)."""

    client_config: ClientConfig = Field(
        default_factory=dict,
        description="Kafka client properties (security.protocol, ssl.ca.location, ...); credentials are "
        "refused here: put them in clientConfigSecretRef.",
    )
    client_config_secret_ref: SecretRef | None = Field(
        default=None,
        description=(
            "Secret whose keys are extra Kafka client properties (sasl.username, sasl.password), mounted "
            "read-only and read as files by the Jobs that talk to Kafka (copy, cleanup; the Secret in their "
            "namespace) and by the operator's own clients (a file cluster: the Secret mounted into the "
            "operator's pod; a TieredCluster: read by name, with `get` on exactly that Secret)."
        ),
    )
    remote: RemoteStorage = Field(description="Where the cluster's remote tier lives.")
    jobs: JobDefaults = Field(default_factory=JobDefaults, description="How Jobs run on Kubernetes.")
    trim_hold: TrimHold = Field(
        default_factory=TrimHold,
        description="How consumer groups that read the brokers directly (not through a gateway) hold the "
        "local trim, for every TieredTopic of the cluster without a trimHold of its own.",
    )


class KafkaClusterConfig(ClusterSettings):
    """One Kafka cluster: how to reach it and where its remote tier lives (the form every part of the code
    works with; a TieredCluster resolves into it)."""

    name: LabelSafeName = Field(
        description="What clusterRef.name refers to. At most 63 characters: it is the value of the Jobs' "
        "tierkeeper.io/cluster label and part of ConfigMap keys and names.",
    )
    bootstrap_servers: BootstrapServers = Field(
        description="Comma-separated host:port list of the cluster's bootstrap brokers."
    )
