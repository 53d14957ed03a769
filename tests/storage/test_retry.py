"""The retry policy and what counts as transient, on plain calls and real exception types (no network)."""

from __future__ import annotations

import errno
import pickle
import random
from pathlib import Path

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from storage_core.adapters.store import RemoteStore
from storage_core.adapters.transient import is_transient
from storage_core.errors import ConfigError, CorruptDataError, RemoteObjectNotFound, RemoteStoreError
from storage_core.retry import RetryPolicy


def _client_error(code: str, status: int) -> ClientError:
    answer = {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(answer, "PutObject")  # type: ignore[arg-type]


def _wrapped(cause: BaseException, outer: BaseException) -> BaseException:
    """As s3fs raises a server's answer: an OSError whose cause is botocore's ClientError."""
    outer.__cause__ = cause
    return outer


def test_delays_grow_exponentially_up_to_the_cap_with_full_jitter() -> None:
    policy = RetryPolicy(attempts=10, base_delay=0.1, max_delay=1.0)
    rng = random.Random(1)
    for retry in range(1, 10):
        cap = min(1.0, 0.1 * 2 ** (retry - 1))
        draws = [policy.delay(retry, rng) for _ in range(200)]
        assert all(0.0 <= d <= cap for d in draws)
        assert max(draws) > cap * 0.8, "full jitter spreads over the whole range"


def test_a_transient_failure_is_retried_until_it_succeeds() -> None:
    waits: list[float] = []
    calls = iter([ConnectionResetError("reset"), TimeoutError("slow"), "done"])

    def call() -> str:
        item = next(calls)
        if isinstance(item, BaseException):
            raise item
        return item

    runner = RetryPolicy(attempts=3, seed=1).runner()
    runner.sleep = waits.append
    assert runner.run("read", "k", call, transient=is_transient) == "done"
    assert len(waits) == 2


def test_the_bound_gives_a_clear_error_naming_action_key_and_attempts() -> None:
    runner = RetryPolicy(attempts=4, seed=1).runner()
    runner.sleep = lambda _: None
    count = 0

    def call() -> None:
        nonlocal count
        count += 1
        raise _wrapped(_client_error("SlowDown", 503), OSError(errno.EBUSY, "reduce your rate"))

    with pytest.raises(RemoteStoreError, match=r"^write bucket/key: gave up after 4 attempts: .*reduce"):
        runner.run("write", "bucket/key", call, transient=is_transient)
    assert count == 4


def test_a_permanent_failure_is_raised_at_once_unchanged() -> None:
    runner = RetryPolicy(attempts=5).runner()
    runner.sleep = lambda _: pytest.fail("a permanent error must not wait")
    for error in (
        FileNotFoundError("gone"),
        PermissionError("denied"),
        CorruptDataError("bad crc"),
        _wrapped(_client_error("AccessDenied", 403), PermissionError("denied")),
        _wrapped(_client_error("InvalidArgument", 400), OSError(errno.EINVAL, "bad")),
        OSError(errno.ENOSPC, "disk full"),
        ValueError("a bug"),
    ):

        def call(error: BaseException = error) -> None:
            raise error

        with pytest.raises(type(error)):
            runner.run("write", "k", call, transient=is_transient)


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (_wrapped(_client_error("InternalError", 500), OSError(errno.EIO, "x")), True),
        (_wrapped(_client_error("SlowDown", 503), OSError(errno.EBUSY, "x")), True),
        (_wrapped(_client_error("RequestTimeout", 400), OSError(errno.EIO, "x")), True),
        (_wrapped(_client_error("NoSuchKey", 404), FileNotFoundError("x")), False),
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), True),
        (ReadTimeoutError(endpoint_url="http://127.0.0.1:1"), True),
        (ConnectionResetError(), True),
        (RemoteStoreError("gave up already"), False),
    ],
)
def test_transient_classification(error: BaseException, transient: bool) -> None:
    assert is_transient(error) is transient


def test_bad_policies_are_refused() -> None:
    with pytest.raises(ConfigError):
        RetryPolicy(attempts=0)
    with pytest.raises(ConfigError):
        RetryPolicy(base_delay=-1)


def test_the_policy_travels_with_a_pickled_store_and_a_missing_key_is_not_retried(tmp_path: Path) -> None:
    store = RemoteStore(f"file://{tmp_path}", retry=RetryPolicy(attempts=3, max_delay=0.0))
    copy = pickle.loads(pickle.dumps(store))
    assert copy.retry == store.retry
    copy._retrier.sleep = lambda _: pytest.fail("a missing key must not be retried")
    with pytest.raises(RemoteObjectNotFound):
        copy.get(f"{tmp_path}/missing")


def test_cli_refuses_bad_retry_flags(tmp_path: Path) -> None:
    from storage_core.cli.main import main

    assert main(["ls", "--remote", f"file://{tmp_path}", "--retry-attempts", "0"]) == 1
    assert main(["ls", "--remote", f"file://{tmp_path}", "--retry-max-delay", "-1"]) == 1
