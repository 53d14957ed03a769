"""The remote store: an fsspec filesystem behind the few operations the storage core needs.

Only this module talks to fsspec. Third-party errors become ``RemoteStoreError`` (or
``RemoteObjectNotFound``) carrying the key, never credentials. A store pickles as its URL and options, so
Spark tasks and worker processes open their own connections.
"""

from __future__ import annotations

import json
import os
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, BinaryIO, TypeVar

import fsspec

from storage_core.adapters import local_copy, s3_upload
from storage_core.adapters.transient import exception_chain, is_network_error, is_transient, server_answer
from storage_core.errors import CorruptDataError, RemoteObjectNotFound, RemoteStoreError, TierkeeperError
from storage_core.faults import fault_point
from storage_core.retry import RetryPolicy

_T = TypeVar("_T")

UPLOAD_BLOCK = 8 << 20
# Chunks read from a local file on their way to an object store: each is read, CRC-checked and queued while
# still in the CPU cache; 8 MiB chunks measured 10-20% more CPU per GiB.
READ_CHUNK = 1 << 20
SMALL_WRITES_IN_FLIGHT = 4
LOCAL_SEGMENTS_IN_FLIGHT = 2


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:300]


def _explain(exc: BaseException) -> str:
    answer = server_answer(exc)
    return f"{answer or type(exc).__name__}: {_describe(exc)}"


def redacted_url(url: str) -> str:
    """``url`` without the user-info part (``scheme://user:password@host/...``), for messages."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rsplit("@", 1)[1]
    return f"{scheme}{sep}{authority}{slash}{path}"


def bucket_check_verdict(exc: BaseException) -> str | None:
    """What a failed bucket check means: ``missing`` (404 / NoSuchBucket), ``refused`` (401/403: a bad
    key, signature or policy), ``no credentials`` (none found, so no request was sent), ``unreachable`` (no
    HTTP answer at all: refused connection, DNS, timeout), or None (some other answer, reported as it
    is)."""
    for e in exception_chain(exc):
        response = getattr(e, "response", None)
        if isinstance(response, dict) and "Error" in response:
            code = str(response.get("Error", {}).get("Code", ""))
            status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            if status == 404 or code in ("404", "NoSuchBucket"):
                return "missing"
            if status in (401, 403) or code in _REFUSED_CODES:
                return "refused"
            return None
    for e in exception_chain(exc):
        if type(e).__name__ in _NO_CREDENTIALS:
            return "no credentials"
        if isinstance(e, FileNotFoundError):
            return "missing"
        if isinstance(e, PermissionError):
            return "refused"
        if is_network_error(e):
            return "unreachable"
    return None


# botocore's, matched by name: only s3fs's dependency raises them, and this module does not import it.
_NO_CREDENTIALS = frozenset({"NoCredentialsError", "PartialCredentialsError"})
_REFUSED_CODES = frozenset(
    {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"}
)


def _cause(exc: BaseException) -> str:
    """The innermost third-party error's first line (never the options: they are not in it)."""
    last = list(exception_chain(exc))[-1]
    return _describe(last)


@contextmanager
def _translated(action: str, key: str) -> Iterator[None]:
    try:
        yield
    except FileNotFoundError as exc:
        raise RemoteObjectNotFound(f"{action} {key}: not found") from exc
    except TierkeeperError:
        raise  # ours, e.g. a CRC failure raised by the chunk generator being uploaded
    except Exception as exc:
        raise RemoteStoreError(f"{action} {key}: {_explain(exc)}") from exc


class RemoteStore:
    """A remote tier rooted at ``url`` (``s3://bucket/prefix``, ``file:///path``, ``memory://x``...).

    ``fsync`` (local filesystems only): flush every data object and marker to disk before it counts as
    written, so an OS crash cannot leave a COPY_FINISHED marker over data still in the page cache. Turn it
    off only where the target's durability comes from elsewhere; a process crash is safe either way.
    """

    def __init__(
        self,
        url: str,
        storage_options: dict[str, Any] | None = None,
        *,
        fsync: bool = True,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})
        self.fsync = fsync
        self.retry = retry or RetryPolicy()
        self._retrier = self.retry.runner()
        with _translated("open", redacted_url(url)):
            self.fs, self.root = fsspec.core.url_to_fs(url, **_single_attempt(url, self.storage_options))
        self.root = self.root.rstrip("/")
        self.is_local = "file" in _protocols(self.fs)
        self.is_s3 = "s3" in _protocols(self.fs) and s3_upload.can_drive(self.fs)
        if "s3" in _protocols(self.fs):
            # s3fs retries some errors itself (5 tries); with botocore's own 5 that would be 25 requests
            # per call before our policy even sees a failure. This instance is ours (its botocore
            # config differs from any default one in fsspec's instance cache).
            self.fs.retries = 1
        # Side by side, local writes only compete for the cores the copy's checks run on (measured
        # slower); requests to an object store spend their time waiting on the network.
        self.write_concurrency = 1 if self.is_local else SMALL_WRITES_IN_FLIGHT
        # A local copy is copy_file_range, which is bound by one core's page-cache work, not by the disk or
        # the memory bus: two segments copied side by side ran 1.8x faster than one on two cores. An S3
        # upload keeps several parts in flight already, and a second segment would double its buffers.
        self.segments_in_flight = LOCAL_SEGMENTS_IN_FLIGHT if self.is_local else 1

    def __reduce__(
        self,
    ) -> tuple[Callable[..., RemoteStore], tuple[str, dict[str, Any], bool, RetryPolicy]]:
        return (_reopen, (self.url, self.storage_options, self.fsync, self.retry))

    def __repr__(self) -> str:
        return f"RemoteStore({redacted_url(self.url)!r})"  # never the options: they may hold credentials

    def _call(self, action: str, key: str, call: Callable[[], _T]) -> _T:
        """One idempotent operation: retried by the store's policy while it fails transiently, then
        translated (a permanent failure at once, unchanged in meaning)."""
        fault_point("store.request")
        with _translated(action, key):
            return self._retrier.run(action, key, call, transient=is_transient, describe=_explain)

    # ---- writes ---------------------------------------------------------------------------------
    def put_chunks(self, key: str, chunks: Iterable[bytes]) -> int:
        """Stream ``chunks`` into ``key``; return the bytes written. Not atomic: callers mark completion.

        ``chunks`` is consumed once, so the object as a whole is not retried: on S3 each request of the
        upload is (a part is resent whole under its number, which replaces rather than appends); on other
        stores a failure fails the call, and the caller's rerun starts the object again under a new name.
        """
        with _translated("upload", key):
            if self.is_s3:
                return s3_upload.upload_chunks(self.fs, key, chunks, retrier=self._retry_s3)
            fault_point("store.request")
            if self.is_local:
                self.fs.makedirs(os.path.dirname(key), exist_ok=True)
            with self.fs.open(key, "wb", block_size=UPLOAD_BLOCK) as out:
                written = _write_overlapped(out, chunks)
            if self.is_local and self.fsync:
                # The COPY_FINISHED marker is fsynced; the data it vouches for must reach the disk
                # first, or an OS crash could leave a finished marker over incomplete data.
                fd = os.open(key, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            return written

    def put_from_file(
        self, key: str, source: BinaryIO, size: int, inspect: Callable[[memoryview], None]
    ) -> int:
        """Store the first ``size`` bytes of the local file ``source`` as ``key``; return the bytes written.

        ``inspect`` sees every byte in order, in chunks, before the call returns, and may raise to stop
        the upload (the partial object is then the caller's to discard). On a local filesystem the copy
        runs in the kernel and ``inspect`` reads the bytes back from the written object; elsewhere it
        sees the chunks read from ``source`` on their way up. Not atomic: callers mark completion.
        """
        if not self.is_local:
            return self.put_chunks(key, _inspected_chunks(source, size, inspect))
        fault_point("store.request")
        with _translated("upload", key):
            self.fs.makedirs(os.path.dirname(key), exist_ok=True)
            return local_copy.copy_inspected(source, size, key, inspect, fsync=self.fsync)

    def abort_stale_uploads(self, path: str, older_than_ms: int, *, dry_run: bool = False) -> list[str]:
        """Abort unfinished multipart uploads under ``path`` begun before ``older_than_ms``; return keys.

        Only S3 has them; on other stores a killed upload leaves a visible object, which the orphan sweep
        of the segment listing removes.
        """
        if not self.is_s3:
            return []
        with _translated("abort stale uploads under", path):
            return s3_upload.abort_stale_uploads(
                self.fs, path, older_than_ms, dry_run=dry_run, retrier=self._retry_s3
            )

    def put_file(self, local_path: str, key: str) -> None:
        """Upload a local file as-is (the raw baseline the copy path is measured against)."""
        with _translated("upload", key):
            if self.is_local:  # as the other writes do: a key needs no directory made first
                self.fs.makedirs(os.path.dirname(key), exist_ok=True)
            self.fs.put_file(local_path, key)

    def put_atomic(self, key: str, data: bytes) -> None:
        """Write a small object so readers see all of it or nothing.

        An object store PUT is atomic by itself; a local filesystem write is not, so it goes to a
        temporary name first and is renamed into place.
        """
        if self.is_local:
            self._call("write", key, lambda: self._replace_local(key, data))
        else:
            # A whole-object PUT of the same bytes is idempotent: a retry after a lost answer rewrites
            # what the first attempt stored.
            self._call("write", key, lambda: self.fs.pipe_file(key, data))

    def create_exclusive(self, key: str, data: bytes) -> bool:
        """Store a small object only if ``key`` does not exist yet, so that of two writers racing for one
        name exactly one wins; returns whether this call created it (False: it existed).

        A local filesystem links a fully written temporary file to the name (link refuses an existing
        name); S3 sends a conditional PUT (``If-None-Match: *``), which AWS S3 and moto honour. A retry
        after a lost answer may find the object this call created and return False: callers treat False
        as "someone else won" and reload what is there, so they see their own write as a lost race at
        worst, never as a success twice."""
        if self.is_local:
            return self._call("create", key, lambda: self._create_local(key, data))
        if "s3" not in _protocols(self.fs):
            raise RemoteStoreError(f"create {key}: exclusive create needs a file:// or s3:// store")
        return self._call("create", key, lambda: self._create_s3(key, data))

    def _create_local(self, key: str, data: bytes) -> bool:
        directory = os.path.dirname(key)
        self.fs.makedirs(directory, exist_ok=True)
        tmp = f"{directory}/.tmp-{uuid.uuid4().hex}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                if self.fsync:
                    f.flush()
                    os.fsync(f.fileno())
            try:
                os.link(tmp, key)
            except FileExistsError:
                return False
            return True
        finally:
            os.unlink(tmp)

    def _create_s3(self, key: str, data: bytes) -> bool:
        try:
            self.fs.pipe_file(key, data, mode="create")
        except Exception as exc:  # s3fs maps 412 to OSError or leaves the ClientError: look at the answer
            if (server_answer(exc) or repr(exc)).find("PreconditionFailed") >= 0:
                return False
            raise
        return True

    def _replace_local(self, key: str, data: bytes) -> None:
        directory = os.path.dirname(key)
        self.fs.makedirs(directory, exist_ok=True)
        tmp = f"{directory}/.tmp-{uuid.uuid4().hex}"
        with open(tmp, "wb") as f:
            f.write(data)
            if self.fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, key)

    def delete(self, keys: Iterable[str]) -> None:
        """Delete ``keys``; keys already gone are fine (deletion is idempotent)."""
        for key in keys:
            self._call("delete", key, lambda key=key: self._rm_file(key))  # type: ignore[misc]

    def _rm_file(self, key: str) -> None:
        try:
            self.fs.rm_file(key)
        except FileNotFoundError:
            pass  # gone already, perhaps by an attempt whose answer was lost

    def delete_tree(self, path: str) -> None:
        """Remove ``path`` and everything below it; a missing path is fine."""
        self._call("delete", path, lambda: self._rm_tree(path))

    def _rm_tree(self, path: str) -> None:
        try:
            self.fs.rm(path, recursive=True)
        except FileNotFoundError:
            pass

    # ---- reads ----------------------------------------------------------------------------------
    def get(self, key: str) -> bytes:
        # s3fs would first ask for the size (a HEAD) to decide on a concurrent download; the objects read
        # whole are small, so one GET does, and one request is one thing to retry.
        single = {"max_concurrency": 1} if self.is_s3 else {}
        data: bytes = self._call("read", key, lambda: self.fs.cat_file(key, **single))
        return data

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``key``; shorter only at the end of the object."""
        if end <= start:
            return b""
        data: bytes = self._call("read", key, lambda: self._cat_range(key, start, end))
        return data

    def _cat_range(self, key: str, start: int, end: int) -> bytes:
        try:
            data: bytes = self.fs.cat_file(key, start=start, end=end)
        except Exception as exc:
            # S3 answers a range starting at or past the object's end (any range of an empty object) with
            # 416 InvalidRange, where files and memory give the bytes there are: none. A missing object is
            # a 404, never this.
            if (server_answer(exc) or "").startswith("InvalidRange "):
                return b""
            raise
        return data

    def open_local(self, key: str) -> BinaryIO | None:
        """``key`` opened for reading from this machine's filesystem (file:// stores), for readers that map
        objects instead of fetching them; None on every other store. A missing object raises
        ``RemoteObjectNotFound``, as ``get`` does."""
        if not self.is_local:
            return None
        return self._call("read", key, lambda: open(key, "rb"))

    def size(self, key: str) -> int:
        return self._call("stat", key, lambda: int(self.fs.size(key)))

    def exists(self, key: str) -> bool:
        return self._call("stat", key, lambda: bool(self.fs.exists(key)))

    def require_root(self) -> None:
        """Fail with a clear error when the tier's bucket (object stores) or root directory (file://) does not
        exist, so a mistyped URL is not read as an empty tier: ``ls`` would list nothing and ``rebuild`` would
        restore nothing, both exiting 0. An existing but empty prefix is a valid, empty tier."""
        if "memory" in _protocols(self.fs):
            return  # an in-memory tier exists as soon as it is named
        if self.is_local:
            where, what = self.root, "directory"
        else:
            where, what = self.root.split("/", 1)[0], "bucket"
        if "s3" in _protocols(self.fs):
            self._require_bucket(where)
            return
        if not self._call("stat", where, lambda: bool(self.fs.exists(where))):
            raise RemoteStoreError(f"remote tier {redacted_url(self.url)}: {what} {where!r} does not exist")

    def _require_bucket(self, bucket: str) -> None:
        """HEAD the bucket and name what its answer means. s3fs's ``exists`` answers False for every
        failure, so an endpoint that refuses connections or a refused credential looked like a missing
        bucket and sent the user looking for the wrong problem."""
        tier = f"remote tier {redacted_url(self.url)}"
        try:
            self._call("stat", bucket, lambda: self.fs.call_s3("head_bucket", Bucket=bucket))
        except RemoteStoreError as exc:
            verdict = bucket_check_verdict(exc)
            if verdict == "missing":
                raise RemoteStoreError(f"{tier}: bucket {bucket!r} does not exist") from None
            if verdict == "refused":
                raise RemoteStoreError(
                    f"{tier}: the credentials were refused for bucket {bucket!r} ({_cause(exc)}); check "
                    "the access key, the secret and the bucket's policy"
                ) from None
            if verdict == "no credentials":
                raise RemoteStoreError(
                    f"{tier}: no credentials found ({_cause(exc)}); set AWS_ACCESS_KEY_ID and "
                    "AWS_SECRET_ACCESS_KEY, a profile or role, or the key and secret storage options (for "
                    "a public bucket: --anonymous)"
                ) from None
            if verdict == "unreachable":
                raise RemoteStoreError(
                    f"{tier}: endpoint {self._endpoint()} is unreachable ({_cause(exc)}); check "
                    "--endpoint-url and the network"
                ) from None
            raise

    def _endpoint(self) -> str:
        client = getattr(self.fs, "s3", None)
        url = getattr(getattr(client, "meta", None), "endpoint_url", None)
        return redacted_url(str(url)) if url else "of the storage provider"

    def list_dir(self, path: str) -> list[tuple[str, int]]:
        """(key, size) of the objects directly under ``path``; empty when it does not exist."""
        entries = self._call("list", path, lambda: self._ls_fresh(path))
        return [(e["name"], int(e.get("size") or 0)) for e in entries if e.get("type") != "directory"]

    def list_modified(self, path: str) -> dict[str, int | None]:
        """key -> last-modified time (ms since the epoch, None when the backend does not say) of the
        objects directly under ``path``."""
        entries = self._call("list", path, lambda: self._ls_fresh(path))
        return {e["name"]: _modified_ms(e) for e in entries if e.get("type") != "directory"}

    def list_subdirs(self, path: str) -> list[str]:
        entries = self._call("list", path, lambda: self._ls_fresh(path))
        return [e["name"].rstrip("/") for e in entries if e.get("type") == "directory"]

    def _ls_fresh(self, path: str) -> list[dict[str, Any]]:
        """What the store holds now: s3fs's listings cache (on unless the options turn it off) would keep
        answering a long-lived reader (the gateway) with its first listing, so new topics, partitions and
        segments of other writers would stay invisible to it."""
        return self._ls(path, **({"refresh": True} if self._ls_takes_refresh() else {}))

    def _ls(self, path: str, **kwargs: Any) -> list[dict[str, Any]]:
        """Entries under ``path``; a missing path is an empty directory."""
        try:
            entries: list[dict[str, Any]] = self.fs.ls(path, detail=True, **kwargs)
        except FileNotFoundError:
            return []
        return entries

    def _retry_s3(self, action: str, key: str, call: Callable[[], _T]) -> _T:
        """The retrier as ``s3_upload`` takes it: untranslated, so it can tell a missing upload apart."""
        fault_point("store.request")
        return self._retrier.run(action, key, call, transient=is_transient, describe=_explain)

    def invalidate(self, path: str | None = None) -> None:
        self.fs.invalidate_cache(path)

    def _ls_takes_refresh(self) -> bool:
        return "s3" in _protocols(self.fs)


def _reopen(url: str, storage_options: dict[str, Any], fsync: bool, retry: RetryPolicy) -> RemoteStore:
    return RemoteStore(url, storage_options, fsync=fsync, retry=retry)


def _single_attempt(url: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with botocore's own retries turned off on S3 URLs (unless the user configured them), so
    ``RetryPolicy`` is the one rule a request is retried by."""
    protocol, _ = fsspec.core.split_protocol(url)
    if protocol not in ("s3", "s3a"):
        return options
    config = dict(options.get("config_kwargs") or {})
    config.setdefault("retries", {"total_max_attempts": 1})
    return {**options, "config_kwargs": config}


def _inspected_chunks(source: BinaryIO, size: int, inspect: Callable[[memoryview], None]) -> Iterator[bytes]:
    remaining = size
    while remaining > 0:
        chunk = source.read(min(READ_CHUNK, remaining))
        if not chunk:
            raise CorruptDataError(f"segment ended {remaining} bytes early while reading")
        remaining -= len(chunk)
        inspect(memoryview(chunk))
        yield chunk


def _modified_ms(entry: dict[str, Any]) -> int | None:
    for field in ("LastModified", "mtime", "last_modified", "updated", "created"):
        value = entry.get(field)
        if value is None:
            continue
        if hasattr(value, "timestamp"):
            return int(value.timestamp() * 1000)
        if isinstance(value, (int, float)):
            return int(value * 1000)
        if isinstance(value, str):
            from datetime import datetime

            try:
                return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
            except ValueError:
                continue
    return None


def _write_overlapped(out: Any, chunks: Iterable[bytes]) -> int:
    """Write ``chunks`` to ``out`` in order on one helper thread while the caller makes the next ones.

    Producing a chunk (a segment read and CRC-checked) then overlaps the previous writes, and an object-store
    part upload, instead of alternating with them. Up to one upload block may wait in the queue, so memory
    stays bounded. A single chunk (the small objects) is written directly.
    """
    if isinstance(chunks, (list, tuple)) and len(chunks) <= 1:
        for chunk in chunks:
            out.write(chunk)
        return sum(len(chunk) for chunk in chunks)
    written = queued = 0
    pending: deque[tuple[Future[Any], int]] = deque()
    # The pool exits before ``out`` closes, so no write is running when the file is closed; if the chunk
    # source fails, the writes queued before the failure still finish, as in a plain loop.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tierkeeper-upload") as writer:
        for chunk in chunks:
            pending.append((writer.submit(out.write, chunk), len(chunk)))
            written += len(chunk)
            queued += len(chunk)
            while queued > UPLOAD_BLOCK:
                queued -= _settle(pending)
        while pending:
            _settle(pending)
    return written


def _settle(pending: deque[tuple[Future[Any], int]]) -> int:
    """Wait for the oldest queued write; if it failed, cancel the later ones and raise its error."""
    done, size = pending.popleft()
    try:
        done.result()
    except BaseException:
        for waiting, _ in pending:
            waiting.cancel()
        raise
    return size


def _protocols(fs: Any) -> tuple[str, ...]:
    proto = fs.protocol
    return (proto,) if isinstance(proto, str) else tuple(proto)


def storage_option_value(raw: str) -> Any:
    """A storage option's value given as text (a flag, a variable, a Spark option): its JSON when it
    parses (``true``, ``3``, ``{"s3": ...}``), else the text itself."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def storage_options_from_flags(
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    anonymous: bool = False,
    path_style: bool = False,
) -> dict[str, Any]:
    """s3fs options from CLI flags; anything else comes from fsspec's own env/config files."""
    options: dict[str, Any] = {}
    client_kwargs: dict[str, Any] = {}
    if endpoint_url:
        client_kwargs["endpoint_url"] = endpoint_url
    if region:
        client_kwargs["region_name"] = region
    if client_kwargs:
        options["client_kwargs"] = client_kwargs
    if anonymous:
        options["anon"] = True
    if path_style:
        options["config_kwargs"] = {"s3": {"addressing_style": "path"}}
    return options
