"""What a pod spec asks of the process kubelet, resolved against the API: environment, argv, volumes.

Functions here read Secrets, ConfigMaps, PVCs, PersistentVolumes and ServiceAccount tokens through the
API and write volume contents under the pod's directory; they do not start processes.
:class:`ConfigMissing` means "not yet" (a Secret, ConfigMap or PVC binding that may still appear: the
kubelet retries, reporting ``CreateContainerConfigError``); :class:`PodSpecError` is final.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.kube_rest import ApiError, KubeRest
from harness.pod_images import ImageCommand

_FIELD_LABEL = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
DEFAULT_MODE = 0o644


class ConfigMissing(Exception):
    """Something the pod refers to does not exist yet (retry later)."""


class PodSpecError(Exception):
    """The pod asks for something the process kubelet cannot do; the pod fails with this message."""


@dataclass(frozen=True)
class VolumeSource:
    path: Path
    read_only: bool  # secret, configMap, downwardAPI and projected volumes are read-only, as on a kubelet


def field_value(pod: Mapping[str, Any], path: str) -> str:
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": "127.0.0.1",
        "status.podIP": "127.0.0.1",
        "status.hostIPs": "127.0.0.1",
        "status.podIPs": "127.0.0.1",
    }
    if path in simple:
        return str(simple[path] or status.get(path.split(".", 1)[1], ""))
    match = _FIELD_LABEL.match(path)
    if match:
        return str(meta.get(match.group(1), {}).get(match.group(2), ""))
    raise PodSpecError(f"fieldRef {path!r} is not supported by the process kubelet")


def expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: known names are replaced, unknown references kept, $$ is a $."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _VAR_REF.sub(one, value)


def _object_data(
    rest: KubeRest, namespace: str, kind: str, name: str, optional: bool
) -> dict[str, str] | None:
    plural = "secrets" if kind == "Secret" else "configmaps"
    try:
        obj = rest.get(f"/api/v1/namespaces/{namespace}/{plural}/{name}")
    except ApiError as exc:
        if exc.code == 404:
            if optional:
                return None
            raise ConfigMissing(f'{kind.lower()} "{name}" not found') from None
        raise
    if kind == "Secret":
        return {key: base64.b64decode(value).decode() for key, value in (obj.get("data") or {}).items()}
    return dict(obj.get("data") or {})


def _key_ref(rest: KubeRest, namespace: str, kind: str, ref: Mapping[str, Any]) -> str | None:
    data = _object_data(rest, namespace, kind, ref["name"], bool(ref.get("optional")))
    if data is None:
        return None
    if ref["key"] not in data:
        if ref.get("optional"):
            return None
        raise ConfigMissing(f"couldn't find key {ref['key']} in {kind} {namespace}/{ref['name']}")
    return data[ref["key"]]


def container_env(
    rest: KubeRest, pod: Mapping[str, Any], container: Mapping[str, Any], base: Mapping[str, str]
) -> dict[str, str]:
    """``base`` (image env, service variables), then envFrom, then env in order with $(VAR) expansion."""
    namespace = pod["metadata"]["namespace"]
    env = dict(base)
    for source in container.get("envFrom", []):
        kind, ref = (
            ("Secret", source["secretRef"])
            if "secretRef" in source
            else ("ConfigMap", source["configMapRef"])
        )
        data = _object_data(rest, namespace, kind, ref["name"], bool(ref.get("optional")))
        for key, text in (data or {}).items():
            env[source.get("prefix", "") + key] = text
    for var in container.get("env", []):
        if "valueFrom" not in var:
            env[var["name"]] = expand(var.get("value", ""), env)
            continue
        source = var["valueFrom"]
        value: str | None
        if "secretKeyRef" in source:
            value = _key_ref(rest, namespace, "Secret", source["secretKeyRef"])
        elif "configMapKeyRef" in source:
            value = _key_ref(rest, namespace, "ConfigMap", source["configMapKeyRef"])
        elif "fieldRef" in source:
            value = field_value(pod, source["fieldRef"]["fieldPath"])
        else:
            raise PodSpecError(f"env {var['name']}: valueFrom {sorted(source)} is not supported")
        if value is not None:
            env[var["name"]] = value
    return env


def container_argv(container: Mapping[str, Any], image: ImageCommand, env: Mapping[str, str]) -> list[str]:
    """Docker's rule: ``command`` replaces the ENTRYPOINT (and drops CMD), ``args`` replaces CMD."""
    if container.get("command"):
        argv = list(container["command"]) + list(container.get("args", []))
    else:
        argv = list(image.entrypoint) + list(container.get("args") or image.cmd)
    if not argv:
        raise PodSpecError(f"container {container['name']}: no command (the image has no entrypoint or cmd)")
    return [expand(arg, env) for arg in argv]


# -- volumes ----------------------------------------------------------------------------------------------


def _write_files(directory: Path, files: Mapping[str, str | bytes], mode: int, group: int | None) -> None:
    for relative, content in files.items():
        target = directory / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)
        target.chmod(mode)
        if group is not None:
            os.chown(target, -1, group)


def _items(data: Mapping[str, str], items: list[dict[str, Any]] | None) -> dict[str, str]:
    if not items:
        return dict(data)
    return {item.get("path", item["key"]): data[item["key"]] for item in items if item["key"] in data}


def _token(rest: KubeRest, pod: Mapping[str, Any], source: Mapping[str, Any]) -> str:
    meta = pod["metadata"]
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": [source["audience"]] if source.get("audience") else None,
            "expirationSeconds": int(source.get("expirationSeconds", 3600)),
            "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": meta["name"], "uid": meta["uid"]},
        },
    }
    account = pod["spec"].get("serviceAccountName") or "default"
    answer = rest.call(
        "POST", f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{account}/token", body
    )
    return str(answer["status"]["token"])


def _projected(rest: KubeRest, pod: Mapping[str, Any], projected: Mapping[str, Any]) -> dict[str, str]:
    namespace = pod["metadata"]["namespace"]
    files: dict[str, str] = {}
    for source in projected.get("sources", []):
        if "serviceAccountToken" in source:
            files[source["serviceAccountToken"]["path"]] = _token(rest, pod, source["serviceAccountToken"])
        elif "configMap" in source or "secret" in source:
            kind = "ConfigMap" if "configMap" in source else "Secret"
            ref = source["configMap" if kind == "ConfigMap" else "secret"]
            data = _object_data(rest, namespace, kind, ref["name"], bool(ref.get("optional")))
            files.update(_items(data or {}, ref.get("items")))
        elif "downwardAPI" in source:
            files.update(_downward(pod, source["downwardAPI"]))
        else:
            raise PodSpecError(f"projected volume source {sorted(source)} is not supported")
    return files


def _downward(pod: Mapping[str, Any], downward: Mapping[str, Any]) -> dict[str, str]:
    files = {}
    for item in downward.get("items", []):
        if "fieldRef" not in item:
            raise PodSpecError(f"downwardAPI item {item.get('path')}: only fieldRef is supported")
        files[item["path"]] = field_value(pod, item["fieldRef"]["fieldPath"])
    return files


def _claimed_path(rest: KubeRest, namespace: str, claim: str) -> Path:
    try:
        pvc = rest.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim}")
    except ApiError as exc:
        if exc.code == 404:
            raise ConfigMissing(f'persistentvolumeclaim "{claim}" not found') from None
        raise
    volume = pvc["spec"].get("volumeName")
    if pvc.get("status", {}).get("phase") != "Bound" or not volume:
        raise ConfigMissing(f'persistentvolumeclaim "{claim}" is not bound yet')
    pv = rest.get(f"/api/v1/persistentvolumes/{volume}")
    for kind in ("hostPath", "local"):
        if kind in pv["spec"]:
            return Path(pv["spec"][kind]["path"])
    raise PodSpecError(f"PersistentVolume {volume}: only hostPath and local volumes can be mounted")


def prepare_volumes(
    rest: KubeRest, pod: Mapping[str, Any], volumes_dir: Path, fs_group: int | None
) -> dict[str, VolumeSource]:
    """Host directory of every volume of the pod, filled where the volume carries content."""
    namespace = pod["metadata"]["namespace"]
    prepared: dict[str, VolumeSource] = {}
    for volume in pod["spec"].get("volumes", []):
        name = volume["name"]
        directory = volumes_dir / name
        if "emptyDir" in volume:
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(0o777)  # as the kubelet makes it: any container user may write
            prepared[name] = VolumeSource(directory, read_only=False)
        elif "hostPath" in volume:
            path = Path(volume["hostPath"]["path"])
            kind = volume["hostPath"].get("type", "")
            if kind == "DirectoryOrCreate":
                path.mkdir(parents=True, exist_ok=True)
            elif kind in ("Directory", "File") and not path.exists():
                raise ConfigMissing(f"hostPath {path} (type {kind}) does not exist")
            prepared[name] = VolumeSource(path, read_only=False)
        elif "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]
            prepared[name] = VolumeSource(
                _claimed_path(rest, namespace, claim["claimName"]), read_only=bool(claim.get("readOnly"))
            )
        elif {"secret", "configMap", "projected", "downwardAPI"} & set(volume):
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
            if "projected" in volume:
                files = _projected(rest, pod, volume["projected"])
                mode = volume["projected"].get("defaultMode", DEFAULT_MODE)
            elif "downwardAPI" in volume:
                files = _downward(pod, volume["downwardAPI"])
                mode = volume["downwardAPI"].get("defaultMode", DEFAULT_MODE)
            else:
                kind = "Secret" if "secret" in volume else "ConfigMap"
                ref = volume["secret"] if kind == "Secret" else volume["configMap"]
                object_name = ref.get("secretName") if kind == "Secret" else ref.get("name")
                data = _object_data(rest, namespace, kind, object_name, bool(ref.get("optional")))
                files, mode = _items(data or {}, ref.get("items")), ref.get("defaultMode", DEFAULT_MODE)
            _write_files(directory, files, mode, fs_group)
            directory.chmod(0o755)
            prepared[name] = VolumeSource(directory, read_only=True)
        else:
            kinds = sorted(set(volume) - {"name"})
            raise PodSpecError(f"volume {name}: {kinds} volumes are not supported by the process kubelet")
    return prepared
