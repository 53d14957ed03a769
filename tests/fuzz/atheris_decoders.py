"""Coverage-guided fuzzing of the byte decoders with atheris (libFuzzer), for long local runs.

Not part of the pytest suite (atheris is not a test dependency): ``pip install atheris``, then

    PYTHONPATH=tests .venv/bin/python tests/fuzz/atheris_decoders.py -runs=200000

The first input byte picks the target; the rest is its input. Only ``TierkeeperError`` is an acceptable
failure, exactly as in tests/formats/test_formats_fuzz.py; anything else crashes the run with the input
saved by libFuzzer (``crash-<sha1>``). Results go into docs/reliability.md.
"""

from __future__ import annotations

import io
import sys

import atheris

with atheris.instrument_imports():
    from storage_core.errors import TierkeeperError
    from storage_core.formats.batch_chain import BatchChainCheck
    from storage_core.formats.batch_stream import BatchStreamValidator
    from storage_core.formats.checkpoints import (
        parse_leader_epoch_checkpoint,
        parse_offset_checkpoint,
        parse_partition_metadata,
    )
    from storage_core.formats.indexes import OffsetIndex, TimeIndex, iter_txn_index
    from storage_core.formats.producer_snapshot import parse_producer_snapshot
    from storage_core.formats.record_batch import iter_batches
    from storage_core.formats.records import decode_records
    from storage_core.formats.remote_index import RemotePointerIndex, iter_remote_log_index
    from storage_core.formats.source import bytes_fetcher


def _segment(data: bytes) -> None:
    for _ in iter_batches(bytes_fetcher(data)):
        pass
    validator = BatchStreamValidator()
    validator.feed(data)
    validator.finish()


def _chain(data: bytes) -> None:
    check = BatchChainCheck()
    check.feed(data[: len(data) // 2])
    check.feed(data[len(data) // 2 :])
    check.finish()


def _records(data: bytes) -> None:
    decode_records(data, verify_crc=False)


def _indexes(data: bytes) -> None:
    for kind in (OffsetIndex, TimeIndex):
        index = kind.from_bytes(data, 100)
        list(index)
    list(iter_txn_index(io.BytesIO(data)))


def _remote_index(data: bytes) -> None:
    list(iter_remote_log_index(io.BytesIO(data)))
    pointers = RemotePointerIndex.from_bytes(data)
    list(pointers)
    pointers.floor(100)


def _text(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    for parse in (parse_offset_checkpoint, parse_leader_epoch_checkpoint, parse_partition_metadata):
        try:
            parse(text)
        except TierkeeperError:
            pass


TARGETS = (_segment, _chain, _records, _indexes, _remote_index, _text, parse_producer_snapshot)


def one_input(data: bytes) -> None:
    if not data:
        return
    target = TARGETS[data[0] % len(TARGETS)]
    try:
        target(data[1:])
    except TierkeeperError:
        pass


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
