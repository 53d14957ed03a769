"""CRC-checked batch scans that use a second core: each group of batches is checked half here, half on a
helper thread.

Checking a batch's CRC-32C means reading every byte once more; on a scan straight out of the page cache
(a mapped local object) that pass is the whole cost of the scan, and one thread spends as long on it as a
plain ``read`` of the file takes. The CRC call releases the GIL, so splitting the checks of a group of
batches (tens of megabytes) between two threads halves that pass. Per batch the hand-off would cost more than
it saves (see :func:`~storage_core.formats.record_batch.iter_batches`); per group it is one submit.

Nothing unchecked is ever yielded: a group's batches come out only after all of their CRCs are known,
in order, and a bad one raises ``CorruptDataError`` after the good batches before it, exactly as
``iter_batches`` would. The group's bytes are held meanwhile, so use this on sources whose chunks cost
no copy (views of a mapping); over fetched blocks it would hold a group's worth of memory for nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from concurrent.futures import Executor

from storage_core.errors import CorruptDataError
from storage_core.formats.record_batch import RawBatch, compute_crc, crc_mismatch, iter_batches
from storage_core.formats.source import ViewFetcher


class CrcChecks(enum.Enum):
    """Who checks the CRC of the batches a scan yields."""

    SHARED = "shared"
    """The scan, each group of batches half on this thread and half on a helper (this module)."""
    INLINE = "inline"
    """The scan, each batch on this thread just before it is yielded."""
    DECODER = "decoder"
    """The Arrow decoder, as it reads each batch (``decode_arrow(verify_crc=True)``): batches are yielded
    unchecked, so only for a scan whose every batch goes to that decoder. The scan still checks each
    batch it leaves out itself (control batches, aborted transactions, batches before the start), since
    a damaged header could otherwise drop data silently."""


GROUP_BYTES = 32 << 20
"""Bytes of batches checked per hand-off: large enough that the submit and the wait are noise (8 MiB
groups measured ~10% slower than 32 MiB on a page-cache scan), small enough that the first batch comes
out after a millisecond or two."""


def iter_checked_batches(
    fetch: ViewFetcher,
    start_position: int,
    helper: Executor,
    *,
    path: str | None = None,
    chunk_size: int = 32 << 20,
    group_bytes: int = GROUP_BYTES,
) -> Iterator[RawBatch]:
    """Like ``iter_batches(fetch, start_position, path=path)``, with the CRC checks shared with ``helper``."""
    group: list[RawBatch] = []
    held = 0
    framing = iter_batches(fetch, start_position, path=path, verify_crc=False, chunk_size=chunk_size)
    while True:
        try:
            batch = next(framing)
        except StopIteration:
            break
        except CorruptDataError:
            # Damage (or a torn tail) after the group: the group's batches are still good data.
            yield from _checked(group, helper, path)
            raise
        group.append(batch)
        held += len(batch.data)
        if held >= group_bytes:
            yield from _checked(group, helper, path)
            group, held = [], 0
    yield from _checked(group, helper, path)


def _checked(group: list[RawBatch], helper: Executor, path: str | None) -> Iterator[RawBatch]:
    if not group:
        return
    half = len(group) // 2
    theirs = helper.submit(_crcs, group[half:]) if half else None
    crcs = _crcs(group[:half] if half else group)
    if theirs is not None:
        crcs += theirs.result()
    for batch, actual in zip(group, crcs):
        if actual != batch.header.crc:
            raise crc_mismatch(batch.header, actual, path=path, position=batch.position)
        yield batch


def _crcs(batches: list[RawBatch]) -> list[int]:
    return [compute_crc(batch.data) for batch in batches]
