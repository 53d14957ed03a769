"""The gateway's background writer of group sightings: what its connections carry (GroupMembers) goes to
the compacted topic ``__tierkeeper_gateway_groups`` as storage_core/gateway/group_writes.py decides, so the
trim (``tierkeeper cleanup``, the operator's cleanup Jobs, standalone mode) can tell the groups read through
a gateway from those read directly.

Publishing never touches serving: it runs on a thread of its own; a failure (Kafka unreachable, the topic
not creatable or not writable for the gateway's principal) is logged when it starts and when it ends,
counted in ``tierkeeper_gateway_group_sightings_failures``, and tried again ``RETRY_S`` later; readiness
does not depend on it. While it fails, the gateway's groups look read directly, so they hold the trim
(the safe side) once their last sighting is older than FRESH_MS.

Nothing is written at shutdown (group_writes.py says why).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from storage_core.errors import TierkeeperError
from storage_core.gateway.group_members import GroupMembers
from storage_core.gateway.group_sightings import REPUBLISH_MS, GroupSighting
from storage_core.gateway.group_writes import Written, after_writing, due
from storage_core.gateway_server.metrics import GatewayMetrics

log = logging.getLogger("tierkeeper.gateway")

RETRY_S = 5.0
"""After a failed round, the next one comes this much later (the groups' current state, not a replay)."""
GATHER_S = 0.2
"""A change waits this long before it is written, so a rebalance's joins go out in one round."""
WRITE_TIMEOUT_S = 20.0
"""How long one round waits for Kafka's acknowledgements (the rest are picked up by the next round)."""


class Writer(Protocol):
    """What the publisher needs of the Kafka side (adapters/kafka_group_sightings.py); blocking calls."""

    def ensure_topic(self) -> bool: ...

    def write(
        self, sightings: list[GroupSighting], timeout_s: float
    ) -> tuple[list[GroupSighting], list[str]]: ...


class GroupPublisher:
    def __init__(
        self,
        members: GroupMembers,
        gateway_id: str,
        writer: Callable[[], Writer],
        metrics: GatewayMetrics,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        """``writer`` gives the current writer (a new one after the Kafka client properties were
        reloaded)."""
        self.members = members
        self.gateway_id = gateway_id
        self._writer = writer
        self._metrics = metrics
        self._clock_ms = clock_ms
        self._written: dict[str, Written] = {}
        self._topic_ready = False
        self._failing: dict[str, str] = {}
        """Stage (create, write) -> the failure last logged."""
        self._wake = asyncio.Event()

    async def run(self) -> None:
        """Publish until cancelled (the gateway's background task)."""
        # Its own thread, not GatewayContext.run_tier's: a producer waiting on a slow or unreachable broker
        # must never take a thread that a client's tier read is waiting for.
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tierkeeper-gateway-groups")
        self.members.on_change = self._wake.set
        loop = asyncio.get_running_loop()
        wait_s = 0.0
        try:
            while True:
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=wait_s)
                    await asyncio.sleep(GATHER_S)
                except TimeoutError:
                    pass
                self._wake.clear()
                # What is carried is read here, on the event loop that changes it; only the I/O goes out.
                carried = self.members.carried()
                self._metrics.groups_carried.set(len(carried))
                sightings = due(carried, self._written, self.gateway_id, self._clock_ms())
                ok = True
                if sightings:
                    try:
                        acked, failed = await loop.run_in_executor(pool, self._write, sightings)
                    except Exception as exc:
                        log.exception("writing group sightings failed")
                        acked, failed = [], [f"{type(exc).__name__}: {exc}"]
                    ok = self._outcome(sightings, acked, failed)
                wait_s = RETRY_S if not ok else self._until_due_s()
        finally:
            self.members.on_change = None
            pool.shutdown(wait=False, cancel_futures=True)

    def _until_due_s(self) -> float:
        if not self._written:
            return REPUBLISH_MS / 1000
        oldest = min(w.at_ms for w in self._written.values())
        return max(0.5, (oldest + REPUBLISH_MS - self._clock_ms()) / 1000)

    def _write(self, sightings: list[GroupSighting]) -> tuple[list[GroupSighting], list[str]]:
        """On the publisher's thread: create the topic if this gateway has not seen it yet, then write."""
        try:
            writer = self._writer()
            if not self._topic_ready:
                try:
                    if writer.ensure_topic():
                        log.info("created the group sightings topic")
                    self._topic_ready = True
                    self._failing.pop("create", None)
                except TierkeeperError as exc:
                    # Perhaps only creating is not allowed and the topic exists for writing: write anyway.
                    self._failed("create", f"cannot create the group sightings topic: {exc}")
            return writer.write(sightings, WRITE_TIMEOUT_S)
        except TierkeeperError as exc:
            return [], [str(exc)]

    def _outcome(self, sightings: list[GroupSighting], acked: list[GroupSighting], failed: list[str]) -> bool:
        """Apply one round's answers: True when every sighting due was acknowledged."""
        self._written = after_writing(self._written, acked)
        self._metrics.group_sightings_written.inc(len(acked))
        if failed:
            self._failed(
                "write",
                f"group sightings not written (tried again every {RETRY_S:.0f} s): {failed[0]}",
            )
            return False
        if len(acked) < len(sightings):
            return False  # still on their way: their answers come with the next round's
        if self._failing.pop("write", None) is not None:
            log.info("group sightings are written again")
        return True

    def _failed(self, stage: str, line: str) -> None:
        """Count a failure; log it when it starts or its reason changes (a repeat is only counted)."""
        self._metrics.group_sightings_failures.labels(stage=stage).inc()
        if self._failing.get(stage) != line:
            log.warning("%s", line)
        self._failing[stage] = line
