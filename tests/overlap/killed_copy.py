"""Run ``tierkeeper copy`` in this process and SIGKILL it at a named point of one segment's copy.

Usage: ``python -m overlap.killed_copy POINT BASE_OFFSET -- <tierkeeper copy arguments>``. The fault hook
wraps the partition copier's finishing step, so the kill lands at the same place every run, whatever the
machine's speed:

- ``before-finish``: the segment's COPY_STARTED marker and `.log` are stored, nothing finished it;
- ``after-finish``: its COPY_FINISHED marker is written, the manifest does not list it yet.
"""

from __future__ import annotations

import os
import signal
import sys

from storage_core.cli.main import main
from storage_core.tiering import partition_copy
from storage_core.tiering.copy import SegmentCopier, StoredSegment

POINTS = ("before-finish", "after-finish")


def _install(point: str, base_offset: int) -> None:
    original = partition_copy._finish

    def finish(copier: SegmentCopier, stored: StoredSegment, publisher: partition_copy._Publisher) -> None:
        hit = stored.started.base_offset == base_offset
        if hit and point == "before-finish":
            os.kill(os.getpid(), signal.SIGKILL)
        if hit and point == "after-finish":
            copier.finish(stored)  # COPY_FINISHED written, the publisher (manifest) never hears of it
            os.kill(os.getpid(), signal.SIGKILL)
        original(copier, stored, publisher)

    partition_copy._finish = finish


if __name__ == "__main__":
    point, base, sep, *rest = sys.argv[1:]
    if point not in POINTS or sep != "--":
        sys.exit(f"usage: killed_copy {{{','.join(POINTS)}}} BASE_OFFSET -- ARGS")
    _install(point, int(base))
    sys.exit(main(["copy", *rest]))
