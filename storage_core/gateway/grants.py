"""Which fetches of one client connection the tier may answer without asking the broker first.

A tier answer needs the broker's authorization: its OFFSET_OUT_OF_RANGE for the partition, on the client's
own authenticated connection, comes after its READ check. Asking on every fetch costs a broker round trip
per fetch, which is most of what a consumer reading history waits for. So one such answer is a *grant*:
for ``recheck_s`` from the moment the gateway sent that fetch to the broker, further fetches of the same
partition on the same connection, below the log start the broker reported, are answered from the tier
alone. A fetch naming any partition without a live grant, or at an offset at or above that log start,
goes to the broker as before (and refreshes the grants it earns).

Why this is safe: history is immutable (the batches below the broker's log start are the tier's, byte for
byte), so a grant can only be wrong about *authorization*. A grant starts when the fetch that earned it was
sent, which is before the broker checked it, so a READ revoked at time R (as the broker sees it) stops
every tier answer to a fetch the client sends after R + ``recheck_s``. Kafka's own consumers see an ACL
change only once it reaches the broker, so the bound is on top of that delay, not instead of it.
Grants belong to one client connection: they are never shared between principals, and die with it.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Grant:
    expires: float
    """Clock time after which the broker must be asked again."""
    local_start: int
    """The broker's log start offset for the partition when the grant was made: offsets at or above it
    are the broker's to serve."""
    incarnation: Hashable
    """The tiered topic incarnation the grant was made for (its topic id): a recreated topic of the same
    name gets no tier answers from its predecessor's grant."""


class Grants:
    """The live grants of one client connection, by the partition as its fetch requests name it."""

    def __init__(self, recheck_s: float) -> None:
        self.recheck_s = recheck_s
        self._by_key: dict[Hashable, Grant] = {}

    def grant(self, key: Hashable, sent_at: float, local_start: int, incarnation: Hashable) -> None:
        """The broker answered ``key`` OFFSET_OUT_OF_RANGE to a fetch sent at ``sent_at``, its log start
        being ``local_start``."""
        if self.recheck_s <= 0:
            return
        expires = sent_at + self.recheck_s
        current = self._by_key.get(key)
        if current is None or current.expires <= expires:
            self._by_key[key] = Grant(expires, local_start, incarnation)

    def covers(self, wanted: Iterable[tuple[Hashable, int]], now: float) -> dict[Hashable, Grant] | None:
        """The grants for every ``(key, fetch offset)`` of a fetch, or None when any partition needs the
        broker (no live grant, or an offset the broker holds)."""
        out: dict[Hashable, Grant] = {}
        for key, offset in wanted:
            found = self._by_key.get(key)
            if found is None or now >= found.expires:
                self._by_key.pop(key, None)
                return None
            if offset >= found.local_start:
                return None
            out[key] = found
        return out or None

    def revoke(self, key: Hashable) -> None:
        """Forget a grant (the broker or the tier answered the partition otherwise)."""
        self._by_key.pop(key, None)

    def __len__(self) -> int:
        return len(self._by_key)
