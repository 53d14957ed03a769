"""Generate what the Helm chart and the configuration reference derive from the code.

- ``charts/tierkeeper/files/rbac.yaml``: the operator's RBAC rules, from :mod:`tierkeeper_operator.rbac`
  (the chart's Roles / ClusterRole render them).
- ``charts/tierkeeper/values.schema.json``: its ``$defs`` (the cluster configuration and Job defaults)
  from the pydantic models, so ``helm install`` checks ``clusters:`` exactly as the operator parses it;
  the rest of the schema (the chart's own values) is written by hand in that file.
- ``examples/manifests/``: the chart rendered with its default values for ``kubectl apply -f`` and
  kustomize (``--helm PATH`` renders them with that helm binary; ``make manifests``).
- ``docs/configuration.md``: every field of TieredTopic, TieredBroker and the cluster configuration with
  its default, validation and description, the cross-field (CEL) rules, and the chart's values
  (rendered by :mod:`tierkeeper_operator.reference_docs`).
- ``charts/tierkeeper/README.md``: what ``helm show readme`` prints: installing, and the same table of
  values.

    python -m tierkeeper_operator.chartgen            # write
    python -m tierkeeper_operator.chartgen --check    # write nothing; exit 1 if a file is stale
    python -m tierkeeper_operator.chartgen --helm PATH [--check]   # the plain manifests too
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from storage_core.api.cluster import JobDefaults, KafkaClusterConfig
from tierkeeper_operator import rbac
from tierkeeper_operator.reference_docs import GENERATED, configuration_text, readme_text

CHART = Path("charts") / "tierkeeper"
RBAC_FILE = CHART / "files" / "rbac.yaml"
SCHEMA_FILE = CHART / "values.schema.json"
VALUES_FILE = CHART / "values.yaml"
DOC_FILE = Path("docs") / "configuration.md"
README_FILE = CHART / "README.md"
DESIGN_FILE = Path("operator") / "tierkeeper_operator" / "DESIGN.md"
PERMISSIONS_BEGIN = "<!-- permissions: generated from rbac.py by `make chart`; do not edit -->"
PERMISSIONS_END = "<!-- end of permissions -->"
MANIFESTS = Path("examples") / "manifests"
MANIFEST_RELEASE = "tierkeeper"
MANIFEST_NAMESPACE = "tierkeeper-system"


def rbac_text() -> str:
    body = {
        "namespaced": rbac.rules(clusterwide=False),
        "clusterwide": rbac.rules(clusterwide=True),
        # rbac.jobNamespaces: the cluster-wide rules without the writes where Jobs run, and those writes
        # (a Role in each of those namespaces).
        "clusterwideWithoutJobWrites": rbac.rules(clusterwide=True, job_writes=False),
        "jobWrites": rbac.rules(clusterwide=True, job_writes=True),
        # rbac.aggregateToDefaultRoles: for people, aggregated into view, and into edit and admin.
        "view": rbac.user_rules(rbac.VIEW_VERBS),
        "edit": rbac.user_rules(rbac.EDIT_VERBS),
    }
    header = f"# {GENERATED}\n# Source: operator/tierkeeper_operator/rbac.py\n"
    return header + str(yaml.safe_dump(body, sort_keys=False))


def permissions_text() -> str:
    """The operator's permissions as a list for its DESIGN.md: one line per resource, verbs and why."""
    lines = []
    for grant_key in sorted({(g.group, g.resource) for g in rbac.ALL_GRANTS}):
        grants = [g for g in rbac.ALL_GRANTS if (g.group, g.resource) == grant_key]
        verbs = sorted({v for g in grants for v in g.verbs})
        group, resource = grant_key
        scope = (
            " (only the objects named in the chart's values: resourceNames)"
            if all(g.named for g in grants)
            else " (watching all namespaces only)"
            if all(g.clusterwide_only for g in grants)
            else " (watching given namespaces only)"
            if all(g.namespaced_only for g in grants)
            else ""
        )
        why = "; ".join(dict.fromkeys(g.why for g in grants))
        lines.append(f"- `{resource}` ({group or 'core'}): {', '.join(verbs)}{scope}. {why}.")
    return "\n".join(lines) + "\n"


def design_text(current: str) -> str:
    """The operator's DESIGN.md with its permissions list regenerated between the markers."""
    head, begin, rest = current.partition(PERMISSIONS_BEGIN)
    _, end, tail = rest.partition(PERMISSIONS_END)
    if not begin or not end:
        raise SystemExit(f"{DESIGN_FILE}: the permission markers are missing")
    return f"{head}{PERMISSIONS_BEGIN}\n{permissions_text()}{PERMISSIONS_END}{tail}"


def model_defs() -> dict[str, Any]:
    """JSON Schema definitions of the cluster configuration and the Job defaults (pydantic's own)."""
    cluster = KafkaClusterConfig.model_json_schema(by_alias=True)
    defs: dict[str, Any] = dict(cluster.pop("$defs", {}))
    defs["KafkaClusterConfig"] = cluster
    defs.setdefault("JobDefaults", JobDefaults.model_json_schema(by_alias=True))
    return dict(sorted(defs.items()))


def schema_text(current: str) -> str:
    """``values.schema.json`` with its hand-written part kept and ``$defs`` regenerated."""
    schema = json.loads(current)
    schema["$defs"] = model_defs()
    return json.dumps(schema, indent=2) + "\n"


# -- plain manifests ---------------------------------------------------------------------------------------


def manifest_files(root: Path, helm: Path) -> dict[Path, str]:
    """The chart with its default values (all namespaces), as helm would install it, plus its Namespace
    and a kustomization listing both."""
    with tempfile.TemporaryDirectory() as home:  # helm reads no user config or repositories
        proc = subprocess.run(
            [str(helm), "template", MANIFEST_RELEASE, str(root / CHART), "--namespace", MANIFEST_NAMESPACE],
            capture_output=True,
            text=True,
            check=False,
            env={"PATH": "/usr/bin:/bin", "HOME": home},
        )
    if proc.returncode != 0:
        raise RuntimeError(f"helm template failed: {proc.stderr.strip()}")
    header = (
        f"# {GENERATED}\n# `helm template {MANIFEST_RELEASE} charts/tierkeeper -n {MANIFEST_NAMESPACE}`\n"
    )
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": MANIFEST_NAMESPACE,
            "labels": {"pod-security.kubernetes.io/enforce": "restricted"},
        },
    }
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["namespace.yaml", "tierkeeper.yaml"],
    }
    return {
        MANIFESTS / "namespace.yaml": f"# {GENERATED}\n" + str(yaml.safe_dump(namespace, sort_keys=False)),
        MANIFESTS / "tierkeeper.yaml": header + proc.stdout,
        MANIFESTS / "kustomization.yaml": f"# {GENERATED}\n"
        + str(yaml.safe_dump(kustomization, sort_keys=False)),
    }


# -- files -----------------------------------------------------------------------------------------------


def render_all(root: Path, helm: Path | None = None) -> dict[Path, str]:
    """Every generated file's text; the manifests only with ``helm`` (they are rendered by it, from the
    chart as the other files leave it, so write those first)."""
    schema = schema_text((root / SCHEMA_FILE).read_text())
    values = yaml.safe_load((root / VALUES_FILE).read_text())
    files = {
        RBAC_FILE: rbac_text(),
        SCHEMA_FILE: schema,
        DOC_FILE: configuration_text(json.loads(schema), values),
        README_FILE: readme_text(json.loads(schema), values),
        DESIGN_FILE: design_text((root / DESIGN_FILE).read_text()),
    }
    if helm is not None:
        files.update(manifest_files(root, helm))
    return files


def stale_files(root: Path, helm: Path | None = None) -> list[str]:
    out = []
    for path, text in render_all(root, helm).items():
        target = root / path
        if not target.exists() or target.read_text() != text:
            out.append(str(path))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tierkeeper_operator.chartgen", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--root", type=Path, default=Path("."), help="repository root (default: .)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if any file is stale")
    parser.add_argument(
        "--helm", type=Path, default=None, help="helm binary: also render examples/manifests/"
    )
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files(args.root, args.helm)
        for name in stale:
            print(f"{name} is stale: run `make chart manifests`", file=sys.stderr)
        return 1 if stale else 0
    for path, text in render_all(args.root).items():
        (args.root / path).write_text(text)
        print(f"wrote {path}")
    if args.helm is not None:
        (args.root / MANIFESTS).mkdir(parents=True, exist_ok=True)
        for path, text in manifest_files(args.root, args.helm).items():
            (args.root / path).write_text(text)
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
