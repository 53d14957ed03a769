"""Stream a chunk source into one S3 object as a multipart upload whose parts travel concurrently.

s3fs's writable file (``fs.open(key, "wb")``) uploads its parts one after another, so a single segment
copy waits for a full round trip per part. Here the parts go through s3fs's own client on its event loop,
a few at a time, while the calling thread keeps producing (reading and CRC-checking) the next chunks.
Memory stays bounded: at most ``in_flight`` parts are uploading and one is filling.

A failure anywhere - the chunk source raising (a corrupted batch) or a part upload failing - aborts the
multipart upload, so no invisible parts are left behind to be billed, and re-raises the first error.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any

from storage_core.faults import fault_point

log = logging.getLogger(__name__)

PART_SIZE = 8 << 20  # S3's minimum part is 5 MiB (except the last); 8 MiB matches s3fs's block size
MAX_IN_FLIGHT = 4
MAX_PARTS = 10_000  # S3's limit per upload


def can_drive(fs: Any) -> bool:
    """Whether ``fs`` (an S3 filesystem) is s3fs with a client and event loop this module can use."""
    return hasattr(fs, "_call_s3") and getattr(fs, "loop", None) is not None


def upload_chunks(
    fs: Any, path: str, chunks: Iterable[bytes], *, part_size: int = PART_SIZE, in_flight: int = MAX_IN_FLIGHT
) -> int:
    """Upload the concatenation of ``chunks`` to ``path`` on the s3fs filesystem ``fs``; return its size.

    Below one part the object goes up as a single PUT. Otherwise each ``part_size`` bytes become one part;
    when ``in_flight`` parts are uploading, the caller waits for the oldest before producing more.
    """
    if part_size < 5 << 20:
        raise ValueError(f"part_size {part_size} is below S3's 5 MiB minimum part size")
    if in_flight < 1:
        raise ValueError("in_flight must be >= 1")
    upload = _MultipartUpload(fs, path, in_flight)
    try:
        filling: list[bytes] = []
        filled = written = 0
        for chunk in chunks:
            filling.append(chunk)
            filled += len(chunk)
            written += len(chunk)
            if filled >= part_size:
                upload.send(b"".join(filling))
                filling, filled = [], 0
        if upload.started:
            if filling:
                upload.send(b"".join(filling))
            upload.complete()
        else:
            upload.put_whole(b"".join(filling))
        return written
    except BaseException:
        upload.abort()
        raise
    finally:
        fs.invalidate_cache(path)


class _MultipartUpload:
    """One object's upload: created on its first part, parts numbered in order, at most N in flight."""

    def __init__(self, fs: Any, path: str, in_flight: int) -> None:
        self.fs = fs
        self.bucket, self.key, _ = fs.split_path(path)
        self.in_flight = in_flight
        self.upload_id: str | None = None
        self.pending: deque[tuple[int, Future[Any]]] = deque()
        self.parts: list[dict[str, Any]] = []

    @property
    def started(self) -> bool:
        return self.upload_id is not None

    def _submit(self, method: str, **kwargs: Any) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(self.fs._call_s3(method, **kwargs), self.fs.loop)

    def _call(self, method: str, **kwargs: Any) -> Any:
        return self._submit(method, **kwargs).result()

    def put_whole(self, body: bytes) -> None:
        self._call("put_object", Bucket=self.bucket, Key=self.key, Body=body)

    def send(self, body: bytes) -> None:
        if self.upload_id is None:
            created = self._call("create_multipart_upload", Bucket=self.bucket, Key=self.key)
            self.upload_id = str(created["UploadId"])
        number = len(self.parts) + len(self.pending) + 1
        if number > MAX_PARTS:
            raise ValueError(f"{self.key}: more than {MAX_PARTS} parts; raise the part size")
        while len(self.pending) >= self.in_flight:
            self._settle_oldest()
        self.pending.append(
            (
                number,
                self._submit(
                    "upload_part",
                    Bucket=self.bucket,
                    Key=self.key,
                    UploadId=self.upload_id,
                    PartNumber=number,
                    Body=body,
                ),
            )
        )
        fault_point("copy.part.sent")

    def _settle_oldest(self) -> None:
        number, future = self.pending.popleft()
        self.parts.append({"PartNumber": number, "ETag": future.result()["ETag"]})

    def complete(self) -> None:
        while self.pending:
            self._settle_oldest()
        self._call(
            "complete_multipart_upload",
            Bucket=self.bucket,
            Key=self.key,
            UploadId=self.upload_id,
            MultipartUpload={"Parts": self.parts},
        )

    def abort(self) -> None:
        """Let the parts in flight finish, then abort the upload; the caller's error is the one raised.

        Parts are not cancelled: S3 may still store a part whose request was under way when the abort
        arrived, so the abort is sent only once nothing of this upload is in flight.
        """
        if self.upload_id is None:
            return
        for _, future in self.pending:
            try:
                future.result()
            except BaseException:  # noqa: BLE001 - a failed part; the first error is already rising
                pass
        self.pending.clear()
        try:
            self._call("abort_multipart_upload", Bucket=self.bucket, Key=self.key, UploadId=self.upload_id)
        except Exception as exc:  # noqa: BLE001 - the original failure matters more; the sweep retries
            log.warning("could not abort multipart upload %s of %s: %s", self.upload_id, self.key, exc)


def abort_stale_uploads(fs: Any, path: str, older_than_ms: int, *, dry_run: bool = False) -> list[str]:
    """Abort the multipart uploads under ``path`` started before ``older_than_ms``; return their keys.

    A copy killed mid-segment leaves its upload open: invisible to listings, yet its parts are stored (and
    billed) until aborted. Uploads younger than the cutoff may belong to a copy still running.
    """
    bucket, prefix, _ = fs.split_path(path)
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    stale: list[tuple[str, str]] = []
    markers: dict[str, str] = {}
    while True:
        page = fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=prefix, **markers)
        for upload in page.get("Uploads", []):
            if upload["Initiated"].timestamp() * 1000 < older_than_ms:
                stale.append((upload["Key"], upload["UploadId"]))
        if not page.get("IsTruncated"):
            break
        markers = {"KeyMarker": page["NextKeyMarker"], "UploadIdMarker": page["NextUploadIdMarker"]}
    if not dry_run:
        for key, upload_id in stale:
            fs.call_s3("abort_multipart_upload", Bucket=bucket, Key=key, UploadId=upload_id)
    return [f"{bucket}/{key}" for key, _ in stale]
