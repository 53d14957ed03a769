"""Kafka's on-disk formats and Tierkeeper's remote index format: parsing and encoding.

Nothing here touches the network or an object store; the only I/O is of local files handed in
(``checkpoints``' atomic writes, ``mapped``, ``source``'s file fetcher). Readers take a file object or a
range fetcher (``source``) and raise ``storage_core.errors.CorruptDataError`` naming the offset and file
of any damage.

- ``source``: the ``(start, end) -> bytes`` fetcher contract and adapters for files and buffers.
- ``crc``, ``varint``, ``codecs``: CRC-32C, zigzag varints, streamed decompression of all Kafka codecs.
- ``record_batch``: batch headers, CRC checks, streaming iteration over a segment, partial tails.
- ``records``: the records inside a batch (headers, control markers, LogAppendTime).
- ``batch_stream``: push-style validation of a segment as it is copied.
- ``segment_files``: file and partition directory names.
- ``indexes``: ``.index``, ``.timeindex`` (zero-filled tails included) and ``.txnindex``.
- ``checkpoints``: log-dir checkpoints, ``leader-epoch-checkpoint``, ``partition.metadata``, topic ids.
- ``producer_snapshot``: ``.snapshot`` files.
- ``remote_index``: remoteLogIndex / remoteOffsetIndex / remoteTimeIndex, and their builder.

Layer: formats (``.importlinter``; storage_core/DESIGN.md, "Layers").
"""
