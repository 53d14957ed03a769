"""Test-only fault hook: crash or fail the process at a named point of the product code.

Tests (and crash trials) set ONE environment variable for the process they start::

    TIERKEEPER_FAULT=<point>[:<n>[:<action>]][,<point>[:<n>[:<action>]]...]

``<point>`` is a name passed to :func:`fault_point` (the list is ``POINTS``); ``<n>`` (default 1) picks
the n-th time this process passes that point; ``<action>`` is ``kill`` (default: SIGKILL to itself, so
nothing is flushed or cleaned up, as in a node crash or an OOM kill; as a container's PID 1, which
cannot SIGKILL itself, ``os._exit(137)``), ``raise`` (:class:`InjectedFault`,
a ``TierkeeperError``, as an I/O error at that spot would) or ``stop`` (SIGSTOP to itself: the process
pauses there until the test sends SIGCONT, so a test can restart a broker at an exact point). A kill at a
named point makes a crash test deterministic: the kill lands exactly where the test wants it, however
fast or slow the machine is.

Never set it in production. When it is unset a point costs one environment lookup. The pass counters
are per process and live in this module: they are the hook's only state, and they exist only to count
passes of points that the variable names.
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass

from storage_core.errors import TierkeeperError

ENV = "TIERKEEPER_FAULT"

# Every point the product code passes, with what has happened when it is reached. A point is named
# <verb>.<step>; tests refer to these names, so renaming one is an interface change.
POINTS: dict[str, str] = {
    "copy.segment.started": "COPY_STARTED marker written, nothing of the segment stored yet",
    "copy.part.sent": "S3: a part of a multipart upload sent (the upload open, not completed)",
    "copy.log.stored": "the segment's .log stored and checked, COPY_FINISHED not yet written",
    "copy.segment.finished": "COPY_FINISHED marker written, manifest not yet rewritten",
    "cleanup.delete.started": "DELETE_STARTED markers written for this run's expired segments",
    "cleanup.segment.data_deleted": "one segment's data objects deleted, DELETE_FINISHED not yet written",
    "cleanup.segment.deleted": "one segment's DELETE_FINISHED marker written",
    "rebuild.chunk.written": "rebuild: one chunk of a file written to its temporary name in staging",
    "rebuild.file.restored": "rebuild: one file checked, fsynced and renamed to its real name in staging",
    "rebuild.installing": "rebuild: marker says INSTALLING, staged partitions not yet moved in",
    "recover.chunk.produced": "recover: a chunk produced in an open transaction, not yet committed",
    "recover.chunk.committed": "recover: a chunk's transaction committed with its progress",
    "scrub.quarantine.marked": "scrub: QUARANTINED markers of a partition written, manifest not rewritten",
    "export.iceberg.split.written": "export iceberg: a task stored one split's data files, nothing committed",
    "export.iceberg.committing": "export iceberg: every data file of the run stored, no snapshot committed",
    "cleanup.groups.observe": "cleanup is about to ask Kafka for a topic's consumer groups (trim hold)",
    "cleanup.trim.recorded": "local trim offset recorded in partition-state.json, DeleteRecords not sent",
    # Passed by every verb (copy, read, cleanup, rebuild, recover...): pick the n-th request to crash there.
    "store.request": "a remote-store operation is about to be sent (adapters.store), once per operation",
}

ACTIONS = ("kill", "raise", "stop")


class InjectedFault(TierkeeperError):
    """Raised at a fault point whose action is ``raise``."""


@dataclass(frozen=True, slots=True)
class FaultSpec:
    point: str
    nth: int = 1
    action: str = "kill"


def parse(value: str) -> list[FaultSpec]:
    """Parse the variable's value; a malformed one is an error (a typo must not silently test nothing)."""
    specs = []
    for item in filter(None, (part.strip() for part in value.split(","))):
        point, _, rest = item.partition(":")
        nth_text, _, action = rest.partition(":")
        if point not in POINTS:
            raise ValueError(f"{ENV}: unknown fault point {point!r} (known: {', '.join(sorted(POINTS))})")
        try:
            nth = int(nth_text) if nth_text else 1
        except ValueError:
            raise ValueError(f"{ENV}: {item!r}: pass count must be an integer") from None
        if nth < 1:
            raise ValueError(f"{ENV}: {item!r}: pass count must be >= 1")
        action = action or "kill"
        if action not in ACTIONS:
            raise ValueError(f"{ENV}: {item!r}: action must be one of {', '.join(ACTIONS)}")
        specs.append(FaultSpec(point, nth, action))
    return specs


class _Counters:
    """Passes per point in this process (a lock: points are passed from several copy threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._passes: dict[str, int] = {}

    def bump(self, point: str) -> int:
        with self._lock:
            self._passes[point] = self._passes.get(point, 0) + 1
            return self._passes[point]


_COUNTERS = _Counters()


def fault_point(point: str) -> None:
    """Mark a named point; crash or raise here when ``TIERKEEPER_FAULT`` asks for it."""
    value = os.environ.get(ENV)
    if not value:
        return
    if point not in POINTS:  # a point used in code but not listed is a bug in the product, not the test
        raise ValueError(f"fault point {point!r} is not listed in storage_core.faults.POINTS")
    specs = [s for s in parse(value) if s.point == point]
    if not specs:
        return
    passes = _COUNTERS.bump(point)
    for spec in specs:
        if spec.nth == passes:
            if spec.action == "stop":
                os.kill(os.getpid(), signal.SIGSTOP)  # returns once the test sends SIGCONT
                continue
            if spec.action == "raise":
                raise InjectedFault(f"injected fault at {point} (pass {passes})")
            _die()


def _die() -> None:
    """End this process at once: nothing flushed, nothing cleaned up, no exception handler run."""
    os.kill(os.getpid(), signal.SIGKILL)
    # Still here: this process is PID 1 of its PID namespace (a container's command), and the kernel
    # drops a signal its init sends itself when it has no handler for it, SIGKILL included. _exit ends it
    # just as abruptly (no atexit, no finally, no buffered output written), with the status a shell
    # reports for a SIGKILLed command.
    os._exit(128 + signal.SIGKILL)
