"""charts/tierkeeper as GitOps tools get it: packed from Git the way Flux's source-controller packs a
source (symbolic links dropped), packaged by `helm package`, linted strictly; and its CRDs carry the
annotations that keep Argo CD's and Flux's prune from deleting them (and with them every TieredTopic and
its remote tier), checked on the real API server through an install, a prune and an uninstall.

Neither Flux nor Argo CD runs here. The rules they apply are ported from their sources, each named
where it is defined, and the tests hold the chart to them.
"""

from __future__ import annotations

import os
import stat
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import create, restore_crds_and_drop, unique

from harness.control_plane import ControlPlane
from harness.paths import REPO_ROOT
from harness.tools import run_tool
from tierkeeper_operator import GROUP, VERSION

CHART = REPO_ROOT / "charts" / "tierkeeper"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
OUR_CRDS = (f"tieredtopics.{GROUP}", f"tieredbrokers.{GROUP}")


def render(chart: Path, *extra: str) -> list[dict[str, Any]]:
    out = run_tool("helm", ["template", "tk", str(chart), "--namespace", "tierkeeper-system", *extra]).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def crds_of(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "CustomResourceDefinition"}


# -- Flux's source-controller ------------------------------------------------------------------------------


def flux_pack(source: Path, artifact: Path) -> None:
    """Pack ``source`` as source-controller's Storage.Archive does (fluxcd/source-controller,
    internal/storage: ``filepath.Walk``, then "Ignore anything that is not a file or directories e.g.
    symlinks": ``if m := fi.Mode(); !(m.IsRegular() || m.IsDir()) { return nil }``; Walk uses Lstat, so a
    link to a directory is skipped too, never followed)."""
    with tarfile.open(artifact, "w:gz") as tar:
        for dirpath, dirnames, filenames in os.walk(source):  # followlinks=False, as filepath.Walk
            for name in sorted([*dirnames, *filenames]):
                path = Path(dirpath) / name
                mode = path.lstat().st_mode
                if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                    continue
                tar.add(path, arcname=str(path.relative_to(source.parent)), recursive=False)


def unpack(artifact: Path, into: Path) -> None:
    with tarfile.open(artifact) as tar:
        tar.extractall(into, filter="data")


def test_the_packer_drops_symbolic_links_as_flux_does(tmp_path: Path) -> None:
    # The test's own packer must show the failure the issue describes, or the next test proves nothing.
    chart = tmp_path / "src" / "chart"
    (chart / "real").mkdir(parents=True)
    (chart / "real" / "a.yaml").write_text("a: 1\n")
    (chart / "linked").symlink_to(chart / "real")
    (chart / "file-link.yaml").symlink_to(chart / "real" / "a.yaml")
    flux_pack(chart, tmp_path / "artifact.tar.gz")
    unpack(tmp_path / "artifact.tar.gz", tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out" / "chart").iterdir()) == ["real"]


def test_the_chart_holds_no_symbolic_link() -> None:
    links = [str(p.relative_to(REPO_ROOT)) for p in CHART.rglob("*") if p.is_symlink()]
    assert links == []


def test_a_flux_packed_git_source_renders_the_same_chart_with_every_crd(tmp_path: Path) -> None:
    flux_pack(CHART, tmp_path / "artifact.tar.gz")
    unpack(tmp_path / "artifact.tar.gz", tmp_path / "checkout")
    packed = render(tmp_path / "checkout" / "tierkeeper")
    assert packed == render(CHART)
    on_disk = {yaml.safe_load(p.read_text())["metadata"]["name"] for p in (REPO_ROOT / "crds").glob("*.yaml")}
    assert set(crds_of(packed)) == on_disk and len(on_disk) == 5  # ours 3, kopf's peerings 2


def test_helm_package_lints_strictly_and_renders_the_same(tmp_path: Path) -> None:
    run_tool("helm", ["lint", "--strict", str(CHART)])
    run_tool("helm", ["package", str(CHART), "--destination", str(tmp_path)])
    (package,) = tmp_path.glob("tierkeeper-*.tgz")
    run_tool("helm", ["lint", "--strict", str(package)])
    assert render(package) == render(CHART)
    assert len(crds_of(render(package))) == 5
    # `helm show readme` of the package (what a chart repository shows): every value, documented.
    readme = run_tool("helm", ["show", "readme", str(package)]).stdout
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def leaves(node: Any, prefix: str = "") -> list[str]:
        if isinstance(node, dict) and node:
            return [leaf for key, value in node.items() for leaf in leaves(value, f"{prefix}{key}.")]
        return [prefix.rstrip(".")]

    def documented(path: str) -> bool:  # a value, or one of its parents that links to a model's section
        parts = path.split(".")
        return any(f"| `{'.'.join(parts[:n])}` |" in readme for n in range(len(parts), 0, -1))

    missing = [path for path in leaves(values) if not documented(path)]
    assert readme.startswith("# tierkeeper") and not missing, missing
    assert "### JobDefaults" in readme and "| `podAnnotations` |" in readme  # the model's fields too


# -- prune rules -------------------------------------------------------------------------------------------


def argocd_option(obj: dict[str, Any], option: str) -> bool:
    """gitops-engine pkg/sync/resource HasAnnotationOption(obj, "argocd.argoproj.io/sync-options", option):
    the annotation's value split on ",", each item trimmed, compared for equality."""
    value = (obj["metadata"].get("annotations") or {}).get("argocd.argoproj.io/sync-options", "")
    return any(item.strip() == option for item in value.split(","))


def argocd_prunes(obj: dict[str, Any]) -> bool:
    """gitops-engine sync_context: a prune task whose object has the sync option ``Prune=false``
    (common.SyncOptionDisablePruning) is skipped ("ignored (no prune)")."""
    return not argocd_option(obj, "Prune=false")


def argocd_deletes_with_application(obj: dict[str, Any]) -> bool:
    """Argo CD's app controller, deleting an Application's resources: objects with ``Delete=false``
    (common.SyncOptionDisableDeletion) are left in place."""
    return not argocd_option(obj, "Delete=false")


def flux_prunes(obj: dict[str, Any]) -> bool:
    """kustomize-controller's garbage collection (fluxcd/pkg/ssa, ``utils.AnyInMetadata`` on
    ``kustomize.toolkit.fluxcd.io/prune: disabled``, labels or annotations) skips the object."""
    key, disabled = "kustomize.toolkit.fluxcd.io/prune", "disabled"
    meta = obj["metadata"]
    return (meta.get("annotations") or {}).get(key) != disabled and (meta.get("labels") or {}).get(
        key
    ) != disabled


@pytest.mark.parametrize("extra", [[], ["--set", "crds.keep=false"]])
def test_no_gitops_prune_may_delete_a_crd(extra: list[str]) -> None:
    crds = crds_of(render(CHART, *extra))
    assert set(OUR_CRDS) <= set(crds)
    for name, crd in crds.items():
        assert not argocd_prunes(crd), name
        assert not argocd_deletes_with_application(crd), name
        assert not flux_prunes(crd), name
    # The rules bite: the chart's other objects are pruned as usual.
    deployment = next(d for d in render(CHART, *extra) if d["kind"] == "Deployment")
    assert argocd_prunes(deployment) and flux_prunes(deployment)


def test_the_repository_crds_carry_the_same_protection() -> None:
    """`kubectl apply -f crds/` or a kustomization of crds/ under Argo CD or Flux: the same annotations."""
    for path in (REPO_ROOT / "crds").glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        assert not argocd_prunes(crd) and not flux_prunes(crd), path.name


def helm(plane: ControlPlane, *args: str) -> str:
    return run_tool("helm", ["--kubeconfig", str(plane.kubeconfig), *args], timeout=120).stdout


def test_prune_and_uninstall_never_delete_a_tieredtopic(
    k8s_control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    """On the real API server: the chart installed, a TieredTopic with ``deletionPolicy: Delete`` created;
    then the CRDs dropped from Git (a new revision rendered with ``crds.enabled=false``) and every object
    Argo CD or Flux would prune by its rule deleted; then ``helm uninstall``. The CRDs and the TieredTopic
    are still there (and so is the remote tier, which only the operator acting on that object deletes)."""
    plane = k8s_control_plane
    release, ns = unique("tk"), unique("tierkeeper-system")
    plane.create_namespace(ns)
    try:
        helm(plane, "install", release, str(CHART), "-n", ns, "--take-ownership")
        topic: dict[str, Any] = yaml.safe_load((REPO_ROOT / "examples" / "tieredtopic.yaml").read_text())
        topic["metadata"] = {"name": "kept"}
        topic["spec"]["deletionPolicy"] = "Delete"
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{k8s_namespace}/tieredtopics"
        create(plane, path, topic)

        live = crds_of(render(CHART, "--namespace", ns))
        next_revision = crds_of(render(CHART, "--namespace", ns, "--set", "crds.enabled=false"))
        dropped = [plane.request("GET", f"{CRD_PATH}/{name}") for name in live if name not in next_revision]
        assert {d["metadata"]["name"] for d in dropped} >= set(OUR_CRDS)
        for crd in dropped:  # what each controller's prune pass does with the live object
            if argocd_prunes(crd) or flux_prunes(crd) or argocd_deletes_with_application(crd):
                plane.request("DELETE", f"{CRD_PATH}/{crd['metadata']['name']}")
        helm(plane, "uninstall", release, "-n", ns)

        for name in OUR_CRDS:
            crd = plane.request("GET", f"{CRD_PATH}/{name}")
            assert "deletionTimestamp" not in crd["metadata"], crd["metadata"]
        kept = plane.request("GET", f"{path}/kept")
        assert "deletionTimestamp" not in kept["metadata"], kept["metadata"]
    finally:
        restore_crds_and_drop(plane, ns)
