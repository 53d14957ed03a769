"""Flags and helpers shared by the subcommands that touch the remote tier or a broker."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from storage_core.errors import ConfigError

if TYPE_CHECKING:
    from storage_core.throttle import RateLimiter


def add_remote_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("remote tier")
    group.add_argument(
        "--remote",
        required=True,
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
        help="extra fsspec storage option (value parsed as JSON when it parses); repeatable. "
        "Credentials are best left to the provider's environment/config files.",
    )


def storage_options(args: argparse.Namespace) -> dict[str, Any]:
    from storage_core.adapters.store import storage_options_from_flags

    options = storage_options_from_flags(
        endpoint_url=args.endpoint_url,
        region=args.region,
        anonymous=args.anonymous,
        path_style=args.path_style,
    )
    for item in args.storage_option:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--storage-option {key!r}: expected KEY=VALUE")
        try:
            options[key] = json.loads(raw)
        except json.JSONDecodeError:
            options[key] = raw
    return options


def require_positive(args: argparse.Namespace, *names: str) -> None:
    """Refuse a count flag (``args.<name>``, e.g. ``parallelism`` for ``--parallelism``) given below 1."""
    for name in names:
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {value}")


def add_rate_limit_arg(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--max-bytes-per-second", type=int, metavar="B", help=help)


def rate_limiter(args: argparse.Namespace) -> RateLimiter | None:
    """The ``RateLimiter`` that ``--max-bytes-per-second`` asks for, or None when there is no limit."""
    from storage_core.throttle import RateLimiter

    rate = args.max_bytes_per_second
    if rate is not None and rate <= 0:
        raise ConfigError(f"--max-bytes-per-second must be > 0, got {rate}")
    return RateLimiter(rate) if rate else None


def open_store(args: argparse.Namespace, *, fsync: bool = True) -> Any:
    from storage_core.adapters.store import RemoteStore

    return RemoteStore(args.remote, storage_options(args), fsync=fsync)


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
