"""Parse specs, manifests and cluster configurations into the API models, with one-line errors.

A bad spec is a result (the resource is Stalled with the message), not an exception: ``parse_spec``
returns the message. A bad cluster configuration or manifest file stops standalone mode with
``ConfigError`` naming the file and the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from storage_core.api import API_VERSION
from storage_core.api.cluster import KafkaClusterConfig
from storage_core.errors import ConfigError

ModelT = TypeVar("ModelT", bound=BaseModel)
MAX_LISTED_ERRORS = 3
KINDS = ("TieredTopic", "TieredBroker", "TieredCluster")


@dataclass(frozen=True)
class Parsed(Generic[ModelT]):
    """The parsed model, or the one-line reason it could not be parsed."""

    value: ModelT | None
    problem: str | None


def _path(root: str, loc: Sequence[int | str]) -> str:
    path = root
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _one_error(root: str, error: Mapping[str, Any]) -> str:
    kind = error["type"]
    where = _path(root, error["loc"])
    if kind == "missing":
        return f"{where}: required field is missing"
    if kind == "extra_forbidden":
        return f"{where}: unknown field"
    message = str(error["msg"]).removeprefix("Value error, ")
    if not error["loc"] or kind == "value_error" and isinstance(error.get("input"), Mapping):
        # Cross-field rules name their fields in the message itself.
        return f"{where}: {message}"
    value = error.get("input")
    if isinstance(value, str | int | float | bool) or value is None:
        return f"{where}: {message} (got {value!r})"
    return f"{where}: {message} (got {type(value).__name__})"


def describe_errors(exc: ValidationError, root: str = "spec") -> str:
    """One line naming each bad field, e.g. ``spec.copy.intervalSeconds: ... (got -5)``."""
    errors = exc.errors(include_url=False)
    parts = [_one_error(root, error) for error in errors[:MAX_LISTED_ERRORS]]
    if len(errors) > MAX_LISTED_ERRORS:
        parts.append(f"and {len(errors) - MAX_LISTED_ERRORS} more")
    return "; ".join(part.replace("\n", " ") for part in parts)


def parse_spec(model: type[ModelT], spec: Mapping[str, Any], root: str = "spec") -> Parsed[ModelT]:
    try:
        return Parsed(value=model.model_validate(dict(spec)), problem=None)
    except ValidationError as exc:
        return Parsed(value=None, problem=describe_errors(exc, root))


@dataclass(frozen=True)
class ManifestObject:
    """One TieredTopic, TieredBroker or TieredCluster document of a manifest file, spec not yet parsed."""

    kind: str
    name: str
    namespace: str
    generation: int | None
    spec: Mapping[str, Any]
    source: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class ManifestSet:
    objects: list[ManifestObject] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    """Documents of other kinds (a ConfigMap beside the resources), named for the user."""


def _load_yaml(text: str, source: str) -> list[Any]:
    try:
        return [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {' '.join(str(exc).split())}") from None


def parse_manifests(text: str, source: str, into: ManifestSet | None = None) -> ManifestSet:
    """The TieredTopic/TieredBroker/TieredCluster documents of one YAML file (several documents allowed)."""
    out = into if into is not None else ManifestSet()
    for index, doc in enumerate(_load_yaml(text, source)):
        where = f"{source} document {index + 1}"
        if not isinstance(doc, Mapping):
            raise ConfigError(f"{where}: not a mapping")
        kind = doc.get("kind")
        if kind not in KINDS:
            out.ignored.append(f"{where}: kind {kind!r}")
            continue
        if doc.get("apiVersion") != API_VERSION:
            raise ConfigError(f"{where}: apiVersion {doc.get('apiVersion')!r} is not {API_VERSION}")
        meta = doc.get("metadata") or {}
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}: metadata.name is required")
        spec = doc.get("spec")
        generation = meta.get("generation")
        out.objects.append(
            ManifestObject(
                kind=str(kind),
                name=name,
                namespace=str(meta.get("namespace") or "default"),
                generation=generation if isinstance(generation, int) else 1,
                spec=spec if isinstance(spec, Mapping) else {},
                source=source,
            )
        )
    return out


def parse_cluster_config(text: str, source: str) -> list[KafkaClusterConfig]:
    """Cluster configurations from one YAML file: one mapping per document, or a list of them."""
    out: list[KafkaClusterConfig] = []
    for doc in _load_yaml(text, source):
        for index, item in enumerate(doc if isinstance(doc, list) else [doc]):
            if not isinstance(item, Mapping):
                raise ConfigError(f"{source}: a cluster configuration must be a mapping")
            parsed = parse_spec(KafkaClusterConfig, item, root=f"cluster[{index}]")
            if parsed.value is None:
                raise ConfigError(f"{source}: {parsed.problem}")
            out.append(parsed.value)
    if not out:
        raise ConfigError(f"{source}: no cluster configuration in the file")
    return out
