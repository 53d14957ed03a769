"""Reconcile rounds on a thread beside kopf: a full round every interval until stopped, or sooner when a
round's plan says a topic's copy or cleanup falls due before then, and a quick round soon after a watch
hands over TieredTopics that were created, edited or are being deleted (:mod:`tierkeeper_operator.wakeups`).

A failed round (API server or Kafka unreachable) is logged and counted, and the next round tries again;
it never stops the operator. With peering (:mod:`tierkeeper_operator.peering`) a round runs only while
this replica is the active one; a standby replica checks every interval and runs nothing.
"""

from __future__ import annotations

import datetime
import logging
import math
import threading
import time

from tierkeeper_operator.loop import Reconciler
from tierkeeper_operator.peering import PeeringGate
from tierkeeper_operator.probes import ReadyState
from tierkeeper_operator.wakeups import Wakeups

log = logging.getLogger("tierkeeper.operator")


SETTLE_SECONDS = 1.0
"""A woken round waits this long first, so a burst of changes (``kubectl apply -f dir/``) is judged by
one quick round rather than by one round per object."""


class Rounds:
    def __init__(
        self,
        reconciler: Reconciler,
        interval: float,
        gate: PeeringGate | None = None,
        ready: ReadyState | None = None,
        settle: float = SETTLE_SECONDS,
        wakeups: Wakeups | None = None,
        due_gap: float | None = None,
    ) -> None:
        self.reconciler = reconciler
        self.interval = interval
        self.gate = gate
        self.ready = ready or ReadyState()
        self.settle = settle
        # A round brought forward for work falling due comes at least this long after the one before, so
        # topics falling due at many different moments cannot turn the rounds into a busy loop.
        self.due_gap = due_gap if due_gap is not None else max(settle, interval / 10)
        self.wakeups = wakeups or Wakeups()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tierkeeper-rounds", daemon=True)
        self._role = ""

    def start(self) -> Rounds:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.wakeups.signal.set()
        self._thread.join(timeout=60)

    def wake(self) -> None:
        """Run the next full round soon (after ``settle`` seconds) instead of at the end of the interval."""
        self.wakeups.full_round()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _may_run(self) -> bool:
        if self.gate is None:
            return True
        active = self.gate.active()
        self.reconciler.metrics.active.set(1 if active else 0)
        role = "active" if active else self.gate.reason
        if role != self._role:  # log the transitions, not every check
            log.info("peering: %s", role)
            if not active:
                self.reconciler.metrics.standby()  # no stale figures from a replica that runs no round
            self._role = role
        if not active:
            self.ready.standby(self.gate.reason)
        return active

    def _run(self) -> None:
        next_full = 0.0  # monotonic time of the next full round: the first one at once
        while not self._stop.is_set():
            asked, objects = self.wakeups.take()
            full = asked or time.monotonic() >= next_full
            if full:
                next_full = time.monotonic() + self.interval
            try:
                # A standby takes and drops what it was handed: the full round it runs once active
                # lists everything anyway.
                if (full or objects) and self._may_run():
                    # A full round lists what was handed over as well.
                    result = self.reconciler.run_round() if full else self.reconciler.run_round(objects)
                    self.ready.round_ran()
                    next_full = min(next_full, self._due_round(result.plan.next_due))
                    if result.created or result.recorded:
                        log.info("round: created %s, recorded %s", result.created, result.recorded)
            except Exception as exc:  # noqa: BLE001 - any failure of a round is retried by the next one
                self.reconciler.metrics.errors.labels(kind=type(exc).__name__).inc()
                self.ready.failed(f"{type(exc).__name__}: {exc}"[:300])
                log.warning("reconcile round failed: %s", exc)
            self._pause(max(0.0, next_full - time.monotonic()))

    def _due_round(self, due: datetime.datetime | None) -> float:
        """Monotonic time of a full round for the copy or cleanup that falls due first (inf: none)."""
        if due is None:
            return math.inf
        wait = (due - self.reconciler.clock()).total_seconds()
        return time.monotonic() + max(self.due_gap, wait)

    def _pause(self, timeout: float) -> None:
        """Until the next full round is due or, once something was handed over, ``settle`` seconds
        later, so the rest of a burst (and what came during the round just run) joins it."""
        if self.wakeups.signal.wait(timeout) and not self._stop.is_set():
            self._stop.wait(self.settle)
        self.wakeups.signal.clear()
