"""Which remote-store failures are worth another attempt: the network and overloaded servers, nothing else.

A missing key, a refused permission, a request the server calls invalid, or our own validation error
(a CRC failure raised while a segment streams up) fails the same way every time; retrying them only
delays the clear error. Everything here inspects the whole exception chain, because s3fs re-raises
botocore's ``ClientError`` as an ``OSError`` with the original as its cause.
"""

from __future__ import annotations

import errno
import http.client
from collections.abc import Iterator

from storage_core.errors import TierkeeperError

# S3 error codes that mean "try again later" whatever their HTTP status.
TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "RequestTimeout",
        "InternalError",
        "ServiceUnavailable",
        # The body arrived damaged or short (a reset mid-upload); S3 stored nothing, resending is safe.
        "BadDigest",
        "IncompleteBody",
        "XAmzContentSHA256Mismatch",
    }
)
# Local errors that a retry cannot cure (a full or read-only disk, a name the filesystem refuses).
PERMANENT_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.ENAMETOOLONG, errno.EINVAL})
PERMANENT_OS_ERRORS = (
    FileNotFoundError,
    PermissionError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
)


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _client_error_verdict(exc: BaseException) -> bool | None:
    """For a botocore ``ClientError`` (an HTTP answer from the server): transient or not; None otherwise."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict) or "Error" not in response:
        return None
    code = str(response.get("Error", {}).get("Code", ""))
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    return code in TRANSIENT_CODES or status >= 500 or status in (408, 429)


def server_answer(exc: BaseException) -> str | None:
    """``"<S3 error code> (HTTP <status>)"`` when a server's error answer is in the chain, else None."""
    for e in exception_chain(exc):
        response = getattr(e, "response", None)
        if isinstance(response, dict) and "Error" in response:
            code = response.get("Error", {}).get("Code", "?")
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?")
            return f"{code} (HTTP {status})"
    return None


def _network_types() -> tuple[type[BaseException], ...]:
    types: list[type[BaseException]] = [ConnectionError, TimeoutError, http.client.HTTPException]
    try:
        import botocore.exceptions as boto  # type: ignore[import-untyped]

        types += [
            boto.ConnectionError,  # connect/read timeouts, resets, closed connections
            boto.HTTPClientError,
            boto.IncompleteReadError,  # a body shorter than its Content-Length
            boto.ResponseStreamingError,
        ]
    except ImportError:  # no S3 support installed; only the standard library's errors can occur
        pass
    try:
        from aiohttp import ClientError as AiohttpClientError

        types.append(AiohttpClientError)
    except ImportError:
        pass
    try:
        from fsspec.exceptions import FSTimeoutError

        types.append(FSTimeoutError)
    except ImportError:
        pass
    return tuple(types)


_NETWORK = _network_types()


def is_network_error(exc: BaseException) -> bool:
    """True for a failure to reach the server at all (refused connection, DNS, timeout, reset)."""
    return isinstance(exc, _NETWORK)


def is_transient(exc: BaseException) -> bool:
    """True when ``exc`` is a failure another attempt of the same idempotent request may not meet."""
    chain = list(exception_chain(exc))
    if any(isinstance(e, TierkeeperError) for e in chain):
        return False  # our own verdict (bad data, a retry bound already exhausted below us)
    for e in chain:
        verdict = _client_error_verdict(e)
        if verdict is not None:
            return verdict  # the server answered: its status decides
    for e in chain:
        if isinstance(e, _NETWORK):
            return True
    top = chain[0]
    if isinstance(top, PERMANENT_OS_ERRORS):
        return False
    if isinstance(top, OSError):
        return top.errno not in PERMANENT_ERRNOS
    return False
