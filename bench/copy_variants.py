"""Interleaved A/B runs of copy variants on the storage benchmark's kept data (file:// only).

The storage benchmark times four copy methods per round; this script times any chosen set, including
variants of the copy path's tuning (range sizes, where the small objects are written), in a balanced
order with the page cache reset before every method, and prints each method's ratio to `put_file`.
Variants change module constants of the copy path for the duration of one method, so every method runs
the same code otherwise. Usage (from the repository root):

    PYTHONPATH=.:tests .venv/bin/python bench/storage_bench.py --targets file --skip-rss \
        --read-rounds 1 --file-copy-rounds 1 --keep --tmp /tmp/tk          # produces the data once
    PYTHONPATH=.:tests:bench .venv/bin/python bench/copy_variants.py /tmp/tk/tierkeeper-storage-bench-XXXX \
        --methods raw,tierkeeper-nofsync,equal-ranges --rounds 8

Methods: raw, raw+fsync (fsspec put_file of each segment's .log/.index/.timeindex, then fsync),
tierkeeper (durable copy), tierkeeper-nofsync, and these variants of tierkeeper-nofsync: equal-ranges
(no ramp: every range 32 MiB), max-range-16m, first-range-256k, slice-256k, small-objects-first (written
before the .log starts instead of during its check), whole-object-crc (a second CRC pass over the data, as
before the batch chain), no-overlap (no starter or finisher threads: every segment's store and finish run
one after another on the calling thread), one-segment-at-a-time (segments overlap by one: N finished while
N+1 is stored, as in run 16), three-segments-at-once.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import storage_measure as m

from storage_core.adapters import local_copy
from storage_core.adapters import store as store_module
from storage_core.adapters.store import RemoteStore
from storage_core.formats.batch_stream import BatchStreamValidator
from storage_core.formats.crc import crc32c
from storage_core.tiering import copy as tiering_copy
from storage_core.tiering import partition_copy

TOPIC = "storage-bench"
MiB = 1 << 20


class _SmallObjectsFirst(tiering_copy._Uploads):
    """Writes each small object as soon as it is handed over (run 13's order: before the .log)."""

    def put(self, obj: Any, data: bytes) -> None:
        self._keys.append(self._key_of(obj))
        self._put(obj, data)


class _WholeObjectCrc(BatchStreamValidator):
    """The validator plus a CRC-32C pass over every chunk: the whole-object checksum the copy computed
    until the batch chain replaced it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.whole = 0

    def feed(self, data: Any) -> Any:
        self.whole = crc32c(data, self.whole)
        return super().feed(data)


class _InlineExecutor:
    """Runs each submitted call at once: segments are stored and finished one after another, no overlap."""

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        pass

    def __enter__(self) -> _InlineExecutor:
        return self

    def __exit__(self, *_exc: Any) -> None:
        pass

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        done: Future[Any] = Future()
        try:
            done.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed over like a pool would
            done.set_exception(exc)
        return done


@contextmanager
def _patched(module: Any, **values: Any) -> Iterator[None]:
    saved = {name: getattr(module, name) for name in values}
    for name, value in values.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


VARIANTS: dict[str, tuple[Any, dict[str, Any]]] = {
    "tierkeeper-nofsync": (local_copy, {}),
    "equal-ranges": (local_copy, {"FIRST_RANGE": 32 * MiB}),
    "max-range-16m": (local_copy, {"RANGE": 16 * MiB}),
    "first-range-256k": (local_copy, {"FIRST_RANGE": 256 << 10}),
    "slice-256k": (local_copy, {"SLICE": 256 << 10}),
    "small-objects-first": (tiering_copy, {"_Uploads": _SmallObjectsFirst}),
    "whole-object-crc": (tiering_copy, {"BatchStreamValidator": _WholeObjectCrc}),
    "no-overlap": (partition_copy, {"ThreadPoolExecutor": _InlineExecutor}),
    "one-segment-at-a-time": (store_module, {"LOCAL_SEGMENTS_IN_FLIGHT": 1}),
    "three-segments-at-once": (store_module, {"LOCAL_SEGMENTS_IN_FLIGHT": 3}),
}


def method(
    name: str, data_dir: Path, target: Path, segments: list[m.Segment], lso: int
) -> Callable[[str], None]:
    """A callable that copies the partition once with method ``name`` into the prefix it is given."""
    log_dir = data_dir / "kafka" / "node-1" / "data"
    if name in ("raw", "raw+fsync"):
        store = RemoteStore(f"file://{target}")

        def raw(prefix: str) -> None:
            m.raw_put(store, segments, prefix, fsync=name == "raw+fsync")

        return raw
    if name == "tierkeeper":

        def durable(prefix: str) -> None:
            m.tierkeeper_copy(RemoteStore(f"file://{target}/{prefix}"), log_dir, TOPIC, lso)

        return durable
    if name not in VARIANTS:
        raise SystemExit(f"unknown method {name!r}; known: raw, raw+fsync, tierkeeper, {', '.join(VARIANTS)}")
    module, values = VARIANTS[name]

    def variant(prefix: str) -> None:
        with _patched(module, **values):
            m.tierkeeper_copy(RemoteStore(f"file://{target}/{prefix}", fsync=False), log_dir, TOPIC, lso)

    return variant


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data_dir", type=Path, help="a temp dir kept by storage_bench.py --keep")
    p.add_argument("--methods", default="raw,tierkeeper-nofsync,equal-ranges")
    p.add_argument("--rounds", type=int, default=8)
    ns = p.parse_args()
    names = [n.strip() for n in ns.methods.split(",") if n.strip()]
    if "raw" not in names:
        names.insert(0, "raw")
    partition = ns.data_dir / "kafka" / "node-1" / "data" / f"{TOPIC}-0"
    segments = m.tiered_segments(partition)
    if not segments:
        raise SystemExit(f"no rolled segments under {partition}")
    lso = segments[-1].next_offset
    payload = sum(s.size for s in segments)
    target = ns.data_dir / "copy-variants"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    runs = {name: method(name, ns.data_dir, target, segments, lso) for name in names}
    seconds: dict[str, list[float]] = {name: [] for name in names}
    try:
        for r in range(ns.rounds):
            for name in m.balanced_order(names, r):
                m.settle()
                m.warm([path for s in segments for path in s.files()])
                started = time.perf_counter()
                runs[name](f"{name}-{r}")
                seconds[name].append(time.perf_counter() - started)
            print(
                f"round {r}: " + ", ".join(f"{n} {payload / seconds[n][-1] / MiB:.0f} MiB/s" for n in names),
                flush=True,
            )
            for child in target.iterdir():
                shutil.rmtree(child)
    finally:
        shutil.rmtree(target, ignore_errors=True)
    for name in names:
        ratios = [a / b for a, b in zip(seconds["raw"], seconds[name])]
        print(
            f"{name}: median {payload / statistics.median(seconds[name]) / MiB:.0f} MiB/s, ratio to raw "
            f"{statistics.median(ratios):.2f} (per round {', '.join(f'{x:.2f}' for x in ratios)})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
