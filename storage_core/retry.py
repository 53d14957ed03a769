"""One retry policy for remote-store requests: capped exponential backoff, full jitter, then a clear error.

The store adapter (``adapters.store``, ``adapters.s3_upload``) is the only user: it decides *what* may be
retried (idempotent requests only) and *which* failures are transient; this module decides *how often* and
*how long to wait*, so the whole process waits by one rule instead of botocore's, s3fs's and ours stacked.

Layer: building blocks (``.importlinter``; storage_core/DESIGN.md, "Layers").
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from storage_core.errors import ConfigError, RemoteStoreError

T = TypeVar("T")

DEFAULT_ATTEMPTS = 8
DEFAULT_BASE_DELAY = 0.1
DEFAULT_MAX_DELAY = 20.0


@dataclass(frozen=True)
class RetryPolicy:
    """How a transient failure of one request is retried.

    ``attempts`` counts every try, the first included (1 = never retry). Before try ``n`` (n >= 2) the
    caller waits a uniformly random time in ``[0, min(max_delay, base_delay * 2 ** (n - 2))]`` ("full
    jitter": many clients that failed together do not come back together).
    """

    attempts: int = DEFAULT_ATTEMPTS
    base_delay: float = DEFAULT_BASE_DELAY
    max_delay: float = DEFAULT_MAX_DELAY
    seed: int | None = None
    """Seed of the jitter (tests); None draws from the OS."""

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ConfigError(f"retry attempts must be >= 1, got {self.attempts}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ConfigError("retry delays must be >= 0")

    def delay(self, retry: int, rng: random.Random) -> float:
        """Seconds to wait before retry number ``retry`` (1 = the second attempt)."""
        cap = min(self.max_delay, self.base_delay * (2 ** (retry - 1)))
        return rng.uniform(0.0, cap)

    def runner(self) -> Retrier:
        return Retrier(self)


@dataclass
class Retrier:
    """Runs calls under a ``RetryPolicy``; one per store, shared by its threads (the RNG is locked)."""

    policy: RetryPolicy
    sleep: Callable[[float], None] = time.sleep
    _rng: random.Random = field(init=False)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.policy.seed)

    def run(
        self,
        action: str,
        key: str,
        call: Callable[[], T],
        *,
        transient: Callable[[BaseException], bool],
        describe: Callable[[BaseException], str] = str,
    ) -> T:
        """``call()``, retried while it raises a transient error and attempts remain.

        A permanent error is raised at once, unchanged. When the last attempt fails transiently the error
        is a ``RemoteStoreError`` naming the action, the key and the number of attempts.
        """
        attempt = 1
        while True:
            try:
                return call()
            except BaseException as exc:
                if not transient(exc):
                    raise
                if attempt >= self.policy.attempts:
                    raise RemoteStoreError(
                        f"{action} {key}: gave up after {attempt} attempt{'s' if attempt > 1 else ''}: "
                        f"{describe(exc)}"
                    ) from exc
            with self._lock:
                wait = self.policy.delay(attempt, self._rng)
            self.sleep(wait)
            attempt += 1
