"""Stream a chunk source into one S3 object as a multipart upload whose parts travel concurrently.

s3fs's writable file (``fs.open(key, "wb")``) uploads its parts one after another, so a single segment
copy waits for a full round trip per part. Here the parts go through s3fs's own client on its event loop,
a few at a time, while the calling thread keeps producing (reading and CRC-checking) the next chunks.
Memory stays bounded: at most ``in_flight`` parts are uploading and one is filling.

Every request is retried on its own through the ``retrier`` the store hands in (the chunk source is
consumed once, so the object as a whole cannot be): a part is resent whole under its number, which
replaces what an earlier attempt stored; a completion whose answer was lost is recognised by the object
it already made. A failure that outlives the retries - or the chunk source raising (a corrupted batch) -
aborts the multipart upload, so no invisible parts are left behind to be billed, and re-raises it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from storage_core.faults import fault_point

log = logging.getLogger(__name__)

PART_SIZE = 8 << 20  # S3's minimum part is 5 MiB (except the last); 8 MiB matches s3fs's block size
MAX_IN_FLIGHT = 4
MAX_PARTS = 10_000  # S3's limit per upload

_T = TypeVar("_T")


class Retrier(Protocol):
    def __call__(self, action: str, key: str, call: Callable[[], _T]) -> _T: ...


def once(action: str, key: str, call: Callable[[], _T]) -> _T:
    """The retrier that does not retry (direct callers and tests of this module alone)."""
    return call()


def can_drive(fs: Any) -> bool:
    """Whether ``fs`` (an S3 filesystem) is s3fs with a client and event loop this module can use."""
    return hasattr(fs, "_call_s3") and getattr(fs, "loop", None) is not None


def upload_chunks(
    fs: Any,
    path: str,
    chunks: Iterable[bytes],
    *,
    part_size: int = PART_SIZE,
    in_flight: int = MAX_IN_FLIGHT,
    retrier: Retrier = once,
) -> int:
    """Upload the concatenation of ``chunks`` to ``path`` on the s3fs filesystem ``fs``; return its size.

    Below one part the object goes up as a single PUT. Otherwise each ``part_size`` bytes become one part;
    when ``in_flight`` parts are uploading, the caller waits for the oldest before producing more.
    """
    if part_size < 5 << 20:
        raise ValueError(f"part_size {part_size} is below S3's 5 MiB minimum part size")
    if in_flight < 1:
        raise ValueError("in_flight must be >= 1")
    upload = _MultipartUpload(fs, path, in_flight, retrier)
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
            upload.complete(written)
        else:
            upload.put_whole(b"".join(filling))
        return written
    except BaseException:
        upload.abort()
        raise
    finally:
        upload.close()
        fs.invalidate_cache(path)


class _MultipartUpload:
    """One object's upload: created on its first part, parts numbered in order, at most N in flight."""

    def __init__(self, fs: Any, path: str, in_flight: int, retrier: Retrier) -> None:
        self.fs = fs
        self.path = path
        self.bucket, self.key, _ = fs.split_path(path)
        self.in_flight = in_flight
        self.retrier = retrier
        self.upload_id: str | None = None
        self.pending: deque[tuple[int, Future[Any]]] = deque()
        self.parts: list[dict[str, Any]] = []
        # Each part retries on its own thread (blocking on s3fs's event loop), so one part's backoff
        # does not hold up the others or the caller producing the next chunk.
        self._senders: ThreadPoolExecutor | None = None

    @property
    def started(self) -> bool:
        return self.upload_id is not None

    def _submit(self, method: str, **kwargs: Any) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(self.fs._call_s3(method, **kwargs), self.fs.loop)

    def _call(self, method: str, **kwargs: Any) -> Any:
        return self._submit(method, **kwargs).result()

    def _retried(self, action: str, method: str, **kwargs: Any) -> Any:
        return self.retrier(action, self.path, lambda: self._call(method, **kwargs))

    def put_whole(self, body: bytes) -> None:
        self._retried("upload", "put_object", Bucket=self.bucket, Key=self.key, Body=body)

    def send(self, body: bytes) -> None:
        if self.upload_id is None:
            # A retry after a lost answer opens a second upload; the first is never completed and the
            # stale-upload sweep aborts it.
            created = self._retried(
                "start upload of", "create_multipart_upload", Bucket=self.bucket, Key=self.key
            )
            self.upload_id = str(created["UploadId"])
            self._senders = ThreadPoolExecutor(self.in_flight, thread_name_prefix="tierkeeper-part")
        number = len(self.parts) + len(self.pending) + 1
        if number > MAX_PARTS:
            raise ValueError(f"{self.key}: more than {MAX_PARTS} parts; raise the part size")
        while len(self.pending) >= self.in_flight:
            self._settle_oldest()
        assert self._senders is not None
        self.pending.append(
            (
                number,
                self._senders.submit(
                    self._retried,
                    f"upload part {number} of",
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

    def complete(self, size: int) -> None:
        while self.pending:
            self._settle_oldest()
        tried = False

        def attempt() -> None:
            nonlocal tried
            try:
                self._call(
                    "complete_multipart_upload",
                    Bucket=self.bucket,
                    Key=self.key,
                    UploadId=self.upload_id,
                    MultipartUpload={"Parts": self.parts},
                )
            except FileNotFoundError:
                # NoSuchUpload on a retry: the earlier attempt completed it and its answer was lost. The
                # key is unique to this copy attempt, so an object there of the full size is ours.
                if not tried or self._stored_size() != size:
                    raise
            finally:
                tried = True

        self.retrier("complete upload of", self.path, attempt)

    def _stored_size(self) -> int | None:
        try:
            head = self._call("head_object", Bucket=self.bucket, Key=self.key)
        except FileNotFoundError:
            return None
        return int(head["ContentLength"])

    def close(self) -> None:
        if self._senders is not None:
            self._senders.shutdown(wait=True)

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
            _abort(self._call, self.bucket, self.key, self.upload_id, self.path, self.retrier)
        except Exception as exc:  # noqa: BLE001 - the original failure matters more; the sweep retries
            log.warning("could not abort multipart upload %s of %s: %s", self.upload_id, self.key, exc)


def _abort(
    call: Callable[..., Any], bucket: str, key: str, upload_id: str, path: str, retrier: Retrier
) -> None:
    """Abort one upload through ``call(method, **kwargs)``; one already gone (an earlier attempt's answer
    was lost) counts as aborted."""

    def attempt() -> None:
        try:
            call("abort_multipart_upload", Bucket=bucket, Key=key, UploadId=upload_id)
        except FileNotFoundError:
            pass

    retrier("abort upload of", path, attempt)


def abort_stale_uploads(
    fs: Any, path: str, older_than_ms: int, *, dry_run: bool = False, retrier: Retrier = once
) -> list[str]:
    """Abort the multipart uploads under ``path`` started before ``older_than_ms``; return their keys.

    A copy killed mid-segment leaves its upload open: invisible to listings, yet its parts are stored (and
    billed) until aborted. Uploads younger than the cutoff may belong to a copy still running.
    """
    bucket, prefix, _ = fs.split_path(path)
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    stale: list[tuple[str, str]] = []
    markers: dict[str, str] = {}
    while True:
        page = retrier(
            "list uploads under",
            path,
            lambda markers=markers: fs.call_s3(  # type: ignore[misc]
                "list_multipart_uploads", Bucket=bucket, Prefix=prefix, **markers
            ),
        )
        for upload in page.get("Uploads", []):
            if upload["Initiated"].timestamp() * 1000 < older_than_ms:
                stale.append((upload["Key"], upload["UploadId"]))
        if not page.get("IsTruncated"):
            break
        markers = {"KeyMarker": page["NextKeyMarker"], "UploadIdMarker": page["NextUploadIdMarker"]}
    if not dry_run:
        for key, upload_id in stale:
            _abort(fs.call_s3, bucket, key, upload_id, f"{bucket}/{key}", retrier)
    return [f"{bucket}/{key}" for key, _ in stale]
