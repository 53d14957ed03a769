"""Flags and helpers shared by the subcommands that touch the remote tier or a broker."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from storage_core.errors import ConfigError
from storage_core.retry import DEFAULT_ATTEMPTS, DEFAULT_MAX_DELAY, RetryPolicy

if TYPE_CHECKING:
    from storage_core.throttle import RateLimiter


def add_remote_args(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """``required=False``: the command can take the URL from elsewhere (``rebuild --settings``)."""
    group = parser.add_argument_group("remote tier")
    group.add_argument(
        "--remote",
        required=required,
        metavar="URL",
        help="root of the remote tier: s3://bucket/prefix, gs://..., file:///path, memory://name",
    )
    group.add_argument("--endpoint-url", help="S3-compatible endpoint (e.g. MinIO); default: AWS")
    group.add_argument("--region", help="S3 region")
    group.add_argument("--anonymous", action="store_true", help="unsigned requests (public buckets)")
    group.add_argument("--path-style", action="store_true", help="path-style S3 addressing")
    group.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="extra fsspec storage option (value parsed as JSON when it parses); repeatable. Not for "
        "credentials: command lines are visible to every user of the machine (ps, /proc) and in pod "
        "specs; use --storage-options-file, TIERKEEPER_STORAGE_OPTION_<KEY> or the provider's own chain",
    )
    group.add_argument(
        "--storage-options-file",
        metavar="PATH",
        help="a JSON object of fsspec storage options, e.g. a mounted Secret "
        f"(default: ${OPTIONS_FILE_ENV}); the way to pass credentials (key, secret, token) without "
        "putting them in the process arguments",
    )
    group.add_argument(
        "--retry-attempts",
        type=int,
        default=DEFAULT_ATTEMPTS,
        metavar="N",
        help=f"tries of each remote request that fails transiently (5xx, throttling, timeouts, "
        f"resets), the first included; default {DEFAULT_ATTEMPTS}",
    )
    group.add_argument(
        "--retry-max-delay",
        type=float,
        default=DEFAULT_MAX_DELAY,
        metavar="SECONDS",
        help=f"cap of the jittered exponential backoff between tries; default {DEFAULT_MAX_DELAY:g}",
    )


OPTIONS_FILE_ENV = "TIERKEEPER_STORAGE_OPTIONS_FILE"
OPTION_ENV_PREFIX = "TIERKEEPER_STORAGE_OPTION_"


def storage_options(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """fsspec options from, in increasing precedence: the options file, ``TIERKEEPER_STORAGE_OPTION_<KEY>``
    variables (``<KEY>`` lower-cased: ``..._KEY``, ``..._SECRET``, ``..._TOKEN``), the remote flags and
    ``--storage-option``. The environment is read here and nowhere else. No message ever quotes a value.
    """
    from storage_core.adapters.store import storage_option_value, storage_options_from_flags

    env = os.environ if environ is None else environ
    options: dict[str, Any] = {}
    path = getattr(args, "storage_options_file", None) or env.get(OPTIONS_FILE_ENV)
    if path:
        options.update(_options_file(path))
    for name, raw in sorted(env.items()):
        if name.startswith(OPTION_ENV_PREFIX) and len(name) > len(OPTION_ENV_PREFIX):
            options[name[len(OPTION_ENV_PREFIX) :].lower()] = storage_option_value(raw)
    options.update(
        storage_options_from_flags(
            endpoint_url=args.endpoint_url,
            region=args.region,
            anonymous=args.anonymous,
            path_style=args.path_style,
        )
    )
    options.update(storage_option_items(args.storage_option, "--storage-option"))
    return options


def storage_option_items(items: Sequence[str], flag: str) -> dict[str, Any]:
    """The ``KEY=JSON`` items of a repeatable storage-option ``flag`` (``--storage-option``,
    ``--to-storage-option``), each value parsed as JSON when it parses; the last of a key wins."""
    from storage_core.adapters.store import storage_option_value

    options: dict[str, Any] = {}
    for n, item in enumerate(items, 1):
        key, sep, raw = item.partition("=")
        if not sep or not key:
            # Not even the key is quoted: without '=' the whole item may be a secret pasted by mistake.
            raise ConfigError(f"{flag} number {n}: expected KEY=VALUE")
        options[key] = storage_option_value(raw)
    return options


def is_credential_option(name: str) -> bool:
    """Whether a storage option's name looks like it holds a credential (never echoed by a command)."""
    from storage_core.api.cluster import credential_like

    return credential_like(name, strict=True)


def _options_file(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            loaded = json.load(f)
    except OSError as exc:
        raise ConfigError(f"storage options file {path}: {exc.strerror or type(exc).__name__}") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        # The parser's message would quote the text around the error, which may be a credential.
        raise ConfigError(f"storage options file {path}: not valid JSON") from None
    if not isinstance(loaded, dict) or not all(isinstance(k, str) for k in loaded):
        raise ConfigError(f"storage options file {path}: expected a JSON object of option names to values")
    return loaded


def require_positive(args: argparse.Namespace, *names: str, flags: dict[str, str] | None = None) -> None:
    """Refuse a count flag (``args.<name>``, e.g. ``parallelism`` for ``--parallelism``) given below 1.

    ``flags`` names the flag of a destination that is not spelled like it (``{"minimum": "--min"}``).
    """
    for name in names:
        value = getattr(args, name)
        if value is not None and value < 1:
            flag = (flags or {}).get(name, f"--{name.replace('_', '-')}")
            raise ConfigError(f"{flag} must be >= 1, got {value}")


def require_above_zero(args: argparse.Namespace, *names: str) -> None:
    """Refuse an amount flag (``args.<name>``: seconds, bytes per second) given as 0 or below; not given
    (None) passes."""
    for name in names:
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be > 0, got {value}")


def key_values(items: Sequence[str], flag: str) -> dict[str, str]:
    """The ``KEY=VALUE`` items of a repeatable ``flag`` (``--spark-conf``, ``--catalog-property``,
    ``--config``) as a dictionary, the last of a key winning. The message quotes the item: these flags
    take no credentials (``--storage-option`` and ``--kafka-property`` parse their own, never quoting)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} {item!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out


def add_rate_limit_arg(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--max-bytes-per-second", type=int, metavar="B", help=help)


def add_bytes_arg(parser: argparse.ArgumentParser, flag: str, default: int, help: str) -> None:
    """A byte-count flag whose help states the default it really has: ``{default}`` in ``help`` becomes the
    default in MiB (KiB, or bytes, when it is not a whole number of them)."""
    parser.add_argument(
        flag, type=int, default=default, metavar="B", help=help.format(default=_size(default))
    )


def _size(count: int) -> str:
    for shift, unit in ((20, "MiB"), (10, "KiB")):
        if count and count % (1 << shift) == 0:
            return f"{count >> shift} {unit}"
    return f"{count} bytes"


def add_dry_run_arg(parser: argparse.ArgumentParser, report: str) -> None:
    """``--dry-run``, whose help says what the command reports instead of acting."""
    parser.add_argument("--dry-run", action="store_true", help=f"{report}; change nothing")


def rate_limiter(args: argparse.Namespace) -> RateLimiter | None:
    """The ``RateLimiter`` that ``--max-bytes-per-second`` asks for, or None when there is no limit."""
    from storage_core.throttle import RateLimiter

    require_above_zero(args, "max_bytes_per_second")
    rate = args.max_bytes_per_second
    return RateLimiter(rate) if rate else None


def open_store(args: argparse.Namespace, *, fsync: bool = True, existing: bool = False) -> Any:
    """The remote tier of ``--remote``. ``existing``: the command only reads it, so a bucket or root
    directory that does not exist is an error (a mistyped URL), not an empty tier."""
    from storage_core.adapters.store import RemoteStore

    store = RemoteStore(args.remote, storage_options(args), fsync=fsync, retry=retry_policy(args))
    if existing:
        store.require_root()
    return store


def retry_policy(args: argparse.Namespace) -> RetryPolicy:
    require_positive(args, "retry_attempts")
    if args.retry_max_delay < 0:
        raise ConfigError(f"--retry-max-delay must be >= 0, got {args.retry_max_delay}")
    return RetryPolicy(attempts=args.retry_attempts, max_delay=args.retry_max_delay)


def emit_json(payload: Any) -> None:
    json.dump(payload, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def progress_bar(*, total: int | None, desc: str, enabled: bool) -> Any:
    """A byte progress bar on stderr; silent when disabled (``--json``, or stderr not a terminal)."""
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        disable=not enabled or not sys.stderr.isatty(),
        file=sys.stderr,
    )


def add_result_file_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--result-file",
        metavar="PATH",
        help="also write a compact machine-readable result here (at most 4096 bytes; the operator's Jobs "
        "pass /dev/termination-log so the result becomes the container's termination message)",
    )


def write_result_file(path: str, text: str) -> None:
    from storage_core.errors import ConfigError

    try:
        with open(path, "w", encoding="utf-8") as out:
            out.write(text)
    except OSError as exc:
        raise ConfigError(f"--result-file {path}: {exc.strerror}") from None
