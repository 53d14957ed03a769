"""A byte-rate limit shared by the threads of one copy, rebuild or recover, like Kafka's remote-copy quota.

Tiering reads the broker's own disk, a rebuild writes the new broker's and a recovery produces into the
cluster; on a busy node each can take the I/O the brokers need to serve producers. The limit is a token
bucket one second deep: a burst of up to one second's worth goes at once, after that callers sleep so the
average stays at the rate.

Layer: building blocks (``.importlinter``; storage_core/DESIGN.md, "Layers").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class RateLimiter:
    """Callers report bytes moved with :meth:`acquire`, which sleeps as long as they are ahead of the rate."""

    def __init__(
        self,
        bytes_per_second: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if bytes_per_second <= 0:
            raise ValueError(f"a rate limit must be > 0 bytes per second, got {bytes_per_second}")
        self.rate = float(bytes_per_second)
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = self.rate  # a full bucket: the first second's worth goes without waiting
        self._last = clock()

    def acquire(self, n: int) -> float:
        """Account for ``n`` bytes; sleep until the rate allows them. Returns the seconds slept."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.rate, self._tokens + (now - self._last) * self.rate) - n
            self._last = now
            wait = -self._tokens / self.rate if self._tokens < 0 else 0.0
        if wait > 0:
            # Outside the lock: the next caller sees the debt and waits behind this one.
            self._sleep(wait)
        return wait


def limited(progress: Callable[[int], None], limiter: RateLimiter | None) -> Callable[[int], None]:
    """A progress callback that also enforces ``limiter`` (unchanged when there is none)."""
    if limiter is None:
        return progress

    def report(n: int) -> None:
        progress(n)
        limiter.acquire(n)

    return report
