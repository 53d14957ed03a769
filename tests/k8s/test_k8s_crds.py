"""The CRDs in crds/ are current, structural, documented, and shared byte-for-byte with the chart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, Field

from harness.paths import REPO_ROOT
from tierkeeper_operator import crdgen

CRD_DIR = REPO_ROOT / "crds"
CHART_CRD_DIR = REPO_ROOT / "charts" / "tierkeeper" / "files" / "crds"

FORBIDDEN_KEYWORDS = {"$ref", "$defs", "definitions", "anyOf", "allOf", "oneOf", "not", "title", "const"}


def all_crd_documents() -> list[dict[str, Any]]:
    return [yaml.safe_load(path.read_text(encoding="utf-8")) for path in sorted(CRD_DIR.glob("*.yaml"))]


def crd_documents() -> list[dict[str, Any]]:
    """Our own CRDs (kopf's peering CRDs, generated beside them, are checked on their own)."""
    return [doc for doc in all_crd_documents() if doc["spec"]["group"] == "tierkeeper.io"]


def walk(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    assert isinstance(node, dict), f"{path}: schema node is not a mapping"
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from walk(sub, f"{path}.{name}")
    if "items" in node:
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def open_api_schemas() -> Iterator[tuple[str, dict[str, Any]]]:
    for doc in crd_documents():
        for version in doc["spec"]["versions"]:
            yield f"{doc['metadata']['name']}/{version['name']}", version["schema"]["openAPIV3Schema"]


def test_crd_files_are_not_stale() -> None:
    stale = crdgen.stale_files(CRD_DIR)
    assert stale == [], (
        f"{stale} differ from the models; run: python -m tierkeeper_operator.crdgen --out crds/"
    )


def test_one_crd_file_per_kind_and_nothing_else() -> None:
    assert sorted(path.name for path in CRD_DIR.glob("*")) == sorted(crdgen.render_all())


def test_chart_crds_are_the_same_bytes() -> None:
    chart_files = sorted(path.name for path in CHART_CRD_DIR.glob("*"))
    assert chart_files == sorted(path.name for path in CRD_DIR.glob("*"))
    for name in chart_files:
        assert (CHART_CRD_DIR / name).read_bytes() == (CRD_DIR / name).read_bytes(), name


@pytest.mark.parametrize("name, schema", list(open_api_schemas()))
def test_schema_is_structural(name: str, schema: dict[str, Any]) -> None:
    for path, node in walk(schema):
        where = f"{name}{path or '<root>'}"
        assert not FORBIDDEN_KEYWORDS & node.keys(), f"{where}: {FORBIDDEN_KEYWORDS & node.keys()}"
        # Model defaults go into descriptions; the one schema default is the unobserved status, which
        # makes a new object read as InProgress to kstatus until the operator writes (crdgen).
        allowed = set(crdgen.SCHEMA_KEYWORDS) | ({"default"} if path == ".status" else set())
        assert node.keys() <= allowed, f"{where}: unexpected {node.keys() - allowed}"
        if path == ".status":
            assert node["default"] == crdgen.UNOBSERVED_STATUS, where
        assert node.get("type") or node.get("x-kubernetes-preserve-unknown-fields"), f"{where}: untyped"
        if "properties" in node:
            assert node["type"] == "object", where
            assert "additionalProperties" not in node, (
                f"{where}: properties and additionalProperties together"
            )
            assert set(node.get("required", [])) <= node["properties"].keys(), where
        assert node.get("additionalProperties", {}) is not False, f"{where}: additionalProperties false"
        if node.get("x-kubernetes-list-type") == "map":
            assert set(node["x-kubernetes-list-map-keys"]) <= set(node["items"].get("required", [])), where


@pytest.mark.parametrize("name, schema", list(open_api_schemas()))
def test_every_field_is_documented(name: str, schema: dict[str, Any]) -> None:
    for path, node in walk(schema["properties"]["spec"], ".spec"):
        if path.endswith(("{}", "[]")):
            continue  # map values and list items are explained by their field
        assert node.get("description"), f"{name}{path}: no description for kubectl explain"


@pytest.mark.parametrize("doc", crd_documents(), ids=lambda doc: doc["metadata"]["name"])
def test_crd_metadata(doc: dict[str, Any]) -> None:
    spec = doc["spec"]
    assert doc["apiVersion"] == "apiextensions.k8s.io/v1"
    assert doc["metadata"]["name"] == f"{spec['names']['plural']}.{spec['group']}"
    assert spec["group"] == "tierkeeper.io"
    assert [v["name"] for v in spec["versions"] if v["storage"]] == ["v1alpha1"]
    for version in spec["versions"]:
        assert version["subresources"] == {"status": {}}
        schema = version["schema"]["openAPIV3Schema"]
        for column in version["additionalPrinterColumns"]:
            if column["jsonPath"].startswith(".metadata.") or "[" in column["jsonPath"]:
                continue  # metadata is the API server's; filtered paths are checked below
            node = schema
            for part in column["jsonPath"].lstrip(".").split("."):
                node = node["properties"][part]
            assert node["type"] == column["type"], column


def test_optional_fields_become_nullable_not_unions() -> None:
    broker = next(schema for name, schema in open_api_schemas() if name.startswith("tieredbrokers"))
    fetchers = broker["properties"]["spec"]["properties"]["replicaFetchers"]
    assert fetchers["nullable"] is True
    assert fetchers["type"] == "object"
    assert fetchers["properties"]["mode"]["type"] == "string"


@pytest.mark.parametrize("doc", crd_documents(), ids=lambda doc: doc["metadata"]["name"])
def test_ready_column_reads_the_ready_condition(doc: dict[str, Any]) -> None:
    columns = {c["name"]: c for c in doc["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert columns["Ready"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
    assert columns["Status"]["jsonPath"] == ".status.message"


def test_the_generator_refuses_a_keyword_nobody_reviewed() -> None:
    """``multipleOf`` is valid OpenAPI but not among the keywords our CRDs are reviewed for."""

    class Spec(BaseModel):
        replicas: int = Field(multiple_of=2, description="Pods.")

    with pytest.raises(crdgen.SchemaError, match=r"^\.replicas: multipleOf: not a keyword our CRDs use"):
        crdgen.model_schema(Spec)


def test_generator_check_mode_reports_staleness(tmp_path: Path) -> None:
    assert crdgen.main(["--out", str(tmp_path)]) == 0
    assert crdgen.main(["--out", str(tmp_path), "--check"]) == 0
    victim = tmp_path / crdgen.file_name(crdgen.KINDS[0])
    victim.write_text(victim.read_text() + "# hand edit\n")
    assert crdgen.main(["--out", str(tmp_path), "--check"]) == 1


def test_peering_crds_are_what_kopf_looks_for() -> None:
    """kopf finds its peering resources by group, version and plural (kopf.dev/v1); both scopes ship."""
    docs = [doc for doc in all_crd_documents() if doc["spec"]["group"] == "kopf.dev"]
    peering = {doc["spec"]["names"]["plural"]: doc for doc in docs}
    assert sorted(peering) == ["clusterkopfpeerings", "kopfpeerings"]
    assert peering["kopfpeerings"]["spec"]["scope"] == "Namespaced"
    assert peering["clusterkopfpeerings"]["spec"]["scope"] == "Cluster"
    for doc in peering.values():
        (version,) = doc["spec"]["versions"]
        assert version["name"] == "v1" and version["storage"] is True
        status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
        assert status["x-kubernetes-preserve-unknown-fields"] is True  # peers write free-form keep-alives
        assert "subresources" not in version  # kopf patches status through the object itself
