"""The example custom resources in examples/ are valid for both the models and the generated CRD schema."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from harness.paths import REPO_ROOT
from storage_core.api import API_VERSION
from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.parse import parse_spec
from storage_core.api.resources import TieredBrokerSpec, TieredTopicSpec
from storage_core.api.tiered_cluster import TieredClusterSpec

EXAMPLES: dict[str, tuple[str, type[BaseModel], str]] = {
    "tieredtopic.yaml": ("TieredTopic", TieredTopicSpec, "tieredtopics.tierkeeper.io.yaml"),
    "tieredbroker.yaml": ("TieredBroker", TieredBrokerSpec, "tieredbrokers.tierkeeper.io.yaml"),
    "tieredcluster.yaml": ("TieredCluster", TieredClusterSpec, "tieredclusters.tierkeeper.io.yaml"),
}


def schema_errors(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """A small OpenAPI v3 checker for the keywords our CRDs use (crdgen.SCHEMA_KEYWORDS).

    Written here rather than borrowed, so the CRD generator is checked against an independent reading
    of the schema.
    """
    if value is None:
        return [] if schema.get("nullable") else [f"{path}: null"]
    kinds: dict[str, type | tuple[type, ...]] = {
        "object": dict,
        "array": list,
        "string": str,
        "boolean": bool,
        "integer": int,
        "number": (int, float),
    }
    expected = schema.get("type")
    if expected and (
        not isinstance(value, kinds[expected]) or (expected == "integer" and isinstance(value, bool))
    ):
        return [f"{path}: {value!r} is not {expected}"]
    errors = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in {schema['enum']}")
    if "minimum" in schema and value < schema["minimum"]:
        errors.append(f"{path}: {value} < {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        errors.append(f"{path}: {value} > {schema['maximum']}")
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append(f"{path}: shorter than {schema['minLength']}")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(f"{path}: longer than {schema['maxLength']}")
    if isinstance(value, dict):
        for name in schema.get("required", []):
            if name not in value:
                errors.append(f"{path}.{name}: required")
        for name, sub in value.items():
            if path == "" and name == "metadata":
                continue  # the API server validates ObjectMeta itself; CRDs declare it as a bare object
            if name in schema.get("properties", {}):
                errors += schema_errors(sub, schema["properties"][name], f"{path}.{name}")
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += schema_errors(sub, schema["additionalProperties"], f"{path}.{name}")
            elif not schema.get("x-kubernetes-preserve-unknown-fields"):
                errors.append(f"{path}.{name}: unknown field (would be pruned)")
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            errors += schema_errors(item, schema["items"], f"{path}[{index}]")
    return errors


def crd_schema(crd_file: str) -> dict[str, Any]:
    crd = yaml.safe_load((REPO_ROOT / "crds" / crd_file).read_text(encoding="utf-8"))
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def load_example(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO_ROOT / "examples" / name).read_text(encoding="utf-8"))
    return doc


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_matches_the_model(name: str) -> None:
    kind, model, _ = EXAMPLES[name]
    doc = load_example(name)
    assert doc["apiVersion"] == API_VERSION
    assert doc["kind"] == kind
    verdict = parse_spec(model, doc["spec"])
    assert verdict.problem is None


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_matches_the_crd_schema(name: str) -> None:
    _, _, crd_file = EXAMPLES[name]
    assert schema_errors(load_example(name), crd_schema(crd_file)) == []


def test_schema_and_model_agree_on_a_bad_interval() -> None:
    doc = load_example("tieredtopic.yaml")
    doc["spec"]["copy"]["intervalSeconds"] = -5
    assert schema_errors(doc, crd_schema("tieredtopics.tierkeeper.io.yaml")) == [
        ".spec.copy.intervalSeconds: -5 < 10"
    ]
    assert parse_spec(TieredTopicSpec, doc["spec"]).problem is not None


def test_examples_folder_has_every_kind() -> None:
    present = {path.name for path in (REPO_ROOT / "examples").glob("tiered*.yaml")}
    assert present == set(EXAMPLES)


def test_cluster_example_matches_the_model() -> None:
    verdict = parse_spec(KafkaClusterConfig, load_example("cluster.yaml"), root="cluster")
    assert verdict.problem is None
