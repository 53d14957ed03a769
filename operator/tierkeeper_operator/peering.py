"""Two or more operator replicas: kopf peering decides which one is active, and the reconcile rounds follow
the same decision.

kopf pauses its handlers while a live peer has a higher priority, or the same one (it then pauses every
operator of that priority). kopf keeps that state to itself, so the rounds thread reads the same peering
objects kopf reads (``KopfPeering`` per watched namespace, or ``ClusterKopfPeering`` when watching all) and
applies the same rule (:func:`is_active`); a round runs only while this operator is active in every one of
them. The objects must exist, or kopf would see no peers and every replica would act: the operator creates
them at startup (:meth:`PeeringGate.ensure`).

Priorities: by default a replica's priority is minus its start time in microseconds, so the oldest live
replica is active and a replica started later (a second replica, the new pod of a rolling update) waits
until the older one stops or stops renewing its keep-alive for ``lifetime`` seconds. An explicit
``--priority N`` (N >= 0) outranks every default one: a developer's operator on a workstation, or
``kopf freeze``, pauses the deployed ones.
"""

from __future__ import annotations

import datetime
import getpass
import os
import socket
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tierkeeper_operator.settings import PeeringSettings

PEERING_GROUP = "kopf.dev"
PEERING_VERSION = "v1"
DEFAULT_PEERING_NAME = "tierkeeper"
DEFAULT_LIFETIME = 60


def default_priority() -> int:
    """Minus this process's start time in microseconds: earlier replicas outrank later ones."""
    return -(time.time_ns() // 1000)


def own_identity(environ: Mapping[str, str] = os.environ) -> str:
    """The peer id: the pod's name when the chart sets ``POD_ID``, else user, host and process."""
    pod = environ.get("POD_ID")
    if pod:
        return pod
    return f"{getpass.getuser()}@{socket.gethostname()}/{os.getpid()}/{time.time_ns()}"


def _lastseen(raw: Any, now: datetime.datetime) -> datetime.datetime:
    if not isinstance(raw, str):
        return now  # kopf treats a peer without lastseen as seen now
    try:
        seen = datetime.datetime.fromisoformat(raw)
    except ValueError:
        return now
    return seen if seen.tzinfo else seen.replace(tzinfo=datetime.UTC)


def is_active(
    peers: Mapping[str, Any], identity: str, priority: int, now: datetime.datetime
) -> tuple[bool, str]:
    """Whether an operator of ``identity`` and ``priority`` may act, given a peering object's ``status``
    (peer id -> {priority, lifetime, lastseen}), and why. kopf's rule: pause while another live peer has
    a priority >= ours (a peer is live until lastseen + lifetime). Stricter than kopf at startup: not
    active before our own keep-alive is in the object, so a replica that starts beside a running one has
    seen the other's entry before its first round."""
    if identity not in peers:
        return False, "waiting for this operator's first keep-alive in the peering object"
    for peer, info in sorted(peers.items()):
        if peer == identity or not isinstance(info, Mapping):
            continue
        try:
            their_priority = int(info.get("priority", 0))
            lifetime = int(info.get("lifetime", DEFAULT_LIFETIME))
        except (TypeError, ValueError):
            continue
        if _lastseen(info.get("lastseen"), now) + datetime.timedelta(seconds=lifetime) <= now:
            continue  # dead: kopf removes it
        if their_priority > priority:
            return False, f"standby: peer {peer} has a higher priority ({their_priority} > {priority})"
        if their_priority == priority:
            return False, f"paused: peer {peer} has the same priority {priority} (kopf pauses both)"
    return True, "active"


class PeeringGate:
    """Reads the peering objects through the Kubernetes adapter and says whether rounds may run."""

    def __init__(self, kube: Any, config: PeeringSettings, clusterwide: bool) -> None:
        if config.priority is None:
            raise ValueError("the peering priority is set at start (OperatorSettings.for_this_process)")
        self.kube = kube
        self.config = config
        self.priority: int = config.priority
        self.clusterwide = clusterwide
        self.reason = "not checked yet"

    def _scopes(self) -> list[str | None]:
        return [None] if self.clusterwide else list(self.kube.namespaces)

    def ensure(self) -> None:
        """Create the peering objects this operator uses when they are missing."""
        for namespace in self._scopes():
            self.kube.ensure_peering(self.config.name, namespace)

    def active(self, now: datetime.datetime | None = None) -> bool:
        """True while this operator is the active one in every peering object it takes part in. A
        missing object is created (the next check reads it); API errors propagate (not ready)."""
        moment = now or datetime.datetime.now(datetime.UTC)
        for namespace in self._scopes():
            body = self.kube.get_peering(self.config.name, namespace)
            if body is None:
                self.kube.ensure_peering(self.config.name, namespace)
                self.reason = "peering object created; waiting for the peers' keep-alives"
                return False
            ok, why = is_active(body.get("status") or {}, self.config.identity, self.priority, moment)
            if not ok:
                self.reason = why
                return False
        self.reason = "active"
        return True
