"""Old -> new offset mapping of restored records, kept as runs of consecutive offsets.

Offsets shift when history is re-produced: the old log has holes where aborted transactions and
control records were (their offsets are not re-produced), and every restore transaction adds one commit
marker to the new log. Within a run both old and new offsets advance by one per record, so a whole
partition's mapping is a short list of runs instead of one pair per record.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import NamedTuple


class OffsetRun(NamedTuple):
    """``length`` records at old offsets ``old_start..`` that now live at new offsets ``new_start..``."""

    old_start: int
    new_start: int
    length: int

    @property
    def old_end(self) -> int:
        return self.old_start + self.length - 1

    @property
    def new_end(self) -> int:
        return self.new_start + self.length - 1


def runs_from_pairs(pairs: Iterable[tuple[int, int]]) -> list[OffsetRun]:
    """Compress ``(old, new)`` pairs into runs; the pairs are sorted by old offset first."""
    runs: list[OffsetRun] = []
    for old, new in sorted(pairs):
        if runs:
            last = runs[-1]
            if old == last.old_end + 1 and new == last.new_end + 1:
                runs[-1] = last._replace(length=last.length + 1)
                continue
            if old <= last.old_end or new <= last.new_end:
                raise ValueError(
                    f"offset pairs overlap or go backwards at old offset {old}, new offset {new}"
                )
        runs.append(OffsetRun(old, new, 1))
    return runs


def concat_runs(parts: Iterable[Sequence[OffsetRun]]) -> list[OffsetRun]:
    """Join the runs of consecutive chunks, merging a run that continues across a chunk boundary."""
    out: list[OffsetRun] = []
    for part in parts:
        for run in part:
            if out and run.old_start == out[-1].old_end + 1 and run.new_start == out[-1].new_end + 1:
                out[-1] = out[-1]._replace(length=out[-1].length + run.length)
            else:
                out.append(run)
    return out


def new_offset(runs: Sequence[OffsetRun], old: int) -> int | None:
    """Where the record at ``old`` was restored to; None if not restored (aborted, control, not yet)."""
    i = bisect.bisect_right([r.old_start for r in runs], old) - 1
    if i < 0 or old > runs[i].old_end:
        return None
    return runs[i].new_start + (old - runs[i].old_start)


def is_shifted(runs: Sequence[OffsetRun]) -> bool:
    """True when some record's new offset differs from its old one."""
    return any(r.new_start != r.old_start for r in runs)
