"""Wake the reconcile rounds when a TieredTopic needs a look now rather than at the next interval (and a
full round when a TieredCluster is created, edited or deleted: ``SpecWatch(full_rounds=True)``).

Full rounds run every ``--reconcile-interval`` seconds (30 by default), so without this a new
TieredTopic, an edited spec or a started deletion would wait up to a whole interval. One watch per
watched namespace (or one for all namespaces) reads the changes; an object whose spec is newer than what
its status says a round saw (``metadata.generation`` != ``status.observedGeneration``: created, spec
edited, deletion started - the API server raises the generation for each) is handed to the rounds
(:class:`Wakeups`), which judge the objects handed over in a quick round (only those topics observed in
Kafka, only their status written). The rounds' own status writes set observedGeneration to the
generation: they hand nothing over, and take back an object a round has judged meanwhile.

Only the objects waiting for a quick round are held, never a cache of all: a full round lists every
object as before. A missed event therefore costs at most one interval, never correctness; a watch that
breaks resumes or starts again, and asks for a full round when it may have missed something.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from tierkeeper_operator.kube import Kube, KubeError, slim

log = logging.getLogger("tierkeeper.operator")

WATCH_SECONDS = 300
"""How long one watch request lasts before the API server ends it and the next one starts."""
RETRY_SECONDS = 5.0
"""Pause before starting a watch again after it failed (API server restarting, connection reset)."""


def needs_look(event: Mapping[str, Any]) -> bool:
    """True when a watch event shows an object whose spec no round has judged yet."""
    if event.get("type") not in ("ADDED", "MODIFIED"):
        return False
    obj = event.get("object") or {}
    generation = (obj.get("metadata") or {}).get("generation")
    observed = (obj.get("status") or {}).get("observedGeneration")
    return generation is not None and generation != observed


class Wakeups:
    """What the watches tell the rounds (a thread-safe hand-over): the objects a quick round should judge,
    keyed ``namespace/name`` (the latest version of each), and whether a full round is due now."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, dict[str, Any]] = {}
        self._full = False
        self.signal = threading.Event()
        """Set whenever there is something to take."""

    def changed(self, key: str, obj: dict[str, Any]) -> None:
        with self._lock:
            self._pending[key] = obj
        self.signal.set()

    def judged(self, key: str) -> None:
        """A round has judged the object's current spec (or it is gone): no quick round needed."""
        with self._lock:
            self._pending.pop(key, None)

    def full_round(self) -> None:
        """Changes may have been missed: the next round lists everything."""
        with self._lock:
            self._full = True
        self.signal.set()

    def take(self) -> tuple[bool, list[dict[str, Any]]]:
        """(full round asked for, the objects waiting), and forget both."""
        with self._lock:
            full, self._full = self._full, False
            objects = list(self._pending.values())
            self._pending.clear()
        return full, objects


class SpecWatch:
    """Watches ``plural`` in each namespace of ``kube`` (or in all) on daemon threads and hands each object
    :func:`needs_look` accepts to ``wakeups`` (the rounds make one quick round of a burst)."""

    def __init__(
        self,
        kube: Kube,
        wakeups: Wakeups,
        plural: str = "tieredtopics",
        *,
        watch_seconds: int = WATCH_SECONDS,
        retry_seconds: float = RETRY_SECONDS,
        full_rounds: bool = False,
    ) -> None:
        self.full_rounds = full_rounds
        """Ask for a full round instead of handing the object over (TieredClusters: a new, edited or
        deleted one changes what every TieredTopic and TieredBroker of its name resolves to)."""
        self.kube = kube
        self.wakeups = wakeups
        self.plural = plural
        self.watch_seconds = watch_seconds
        self.retry_seconds = retry_seconds
        self._stop = threading.Event()
        namespaces: tuple[str | None, ...] = kube.namespaces or (None,)
        self._following = [threading.Event() for _ in namespaces]
        self._threads = [
            threading.Thread(target=self._run, args=(ns, ready), name=f"tierkeeper-watch-{ns}", daemon=True)
            for ns, ready in zip(namespaces, self._following, strict=True)
        ]

    def start(self) -> SpecWatch:
        for thread in self._threads:
            thread.start()
        return self

    def following(self, timeout: float) -> bool:
        """True once every watch knows where it starts: a change made after this returned True wakes
        the rounds (False: not yet after ``timeout`` seconds)."""
        return all(event.wait(timeout) for event in self._following)

    def stop(self) -> None:
        """Ask the watches to end; a thread blocked in a request ends with it (they are daemons)."""
        self._stop.set()

    def _run(self, namespace: str | None, following: threading.Event) -> None:
        where = f"{self.plural} in {namespace or 'all namespaces'}"
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    version = self.kube.collection_version(self.plural, namespace)
                    if following.is_set():  # a fresh start, not the first one
                        self.wakeups.full_round()  # changes between the lost watch and now were not seen
                    following.set()
                version = self._follow(namespace, where, version)
            except Exception as exc:  # noqa: BLE001 - a broken watch is started again, never fatal
                if isinstance(exc, KubeError) and exc.status == 410:
                    version = ""  # too old to resume from
                # Otherwise resume from the last version seen: the events since then are not lost.
                log.warning("watch of %s failed (%s); again in %.0f s", where, exc, self.retry_seconds)
                self._stop.wait(self.retry_seconds)

    def _follow(self, namespace: str | None, where: str, version: str) -> str:
        """One watch request from ``version``; returns where the next one starts ("" : from now on)."""
        for event in self.kube.watch(self.plural, namespace, version, self.watch_seconds):
            if self._stop.is_set():
                break
            if event.get("type") == "ERROR":
                # Typically 410 Gone: the version left the API server's watch cache; start from now.
                status = event.get("object") or {}
                log.info("watch of %s ended: %s", where, status.get("message", status))
                return ""
            obj = event.get("object") or {}
            meta = obj.get("metadata") or {}
            version = str(meta.get("resourceVersion") or version)  # bookmarks carry it too
            if event.get("type") == "BOOKMARK":
                continue
            key = f"{meta.get('namespace')}/{meta.get('name')}"
            if self.full_rounds:
                if needs_look(event) or event.get("type") == "DELETED":
                    self.wakeups.full_round()
            elif needs_look(event):
                self.wakeups.changed(key, slim(obj))
            else:
                self.wakeups.judged(key)
        return version
