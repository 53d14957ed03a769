"""The ``tierkeeper`` console script: one parser, one subcommand module per verb.

Each subcommand module declares a ``COMMAND`` (:class:`~storage_core.cli.subcommand.Subcommand`): its
name, help, the function adding its flags and its handler ``(argparse.Namespace) -> int``. Modules import
heavy libraries inside their handlers so ``tierkeeper --help`` stays fast.

Packages above the storage core (the operator) add their verbs through the ``tierkeeper.commands``
entry-point group instead of being named here: the CLI never imports upward, and import-linter sees
every import this module makes.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import Any

from storage_core import __version__
from storage_core.cli import (
    check_remote,
    cleanup,
    copy,
    export,
    fetchers,
    gateway,
    ls,
    read,
    rebuild,
    recover,
    scrub,
    standalone,
    table_maintenance,
)
from storage_core.cli.subcommand import Subcommand
from storage_core.errors import TierkeeperError

Register = Callable[[Any], None]

# Built-in subcommands, in the order their verbs appear in --help.
BUILTIN_COMMANDS: tuple[Subcommand, ...] = (
    copy.COMMAND,
    read.COMMAND,
    ls.COMMAND,
    export.COMMAND,
    table_maintenance.COMMAND,
    scrub.COMMAND,
    cleanup.COMMAND,
    recover.COMMAND,
    rebuild.COMMAND,
    fetchers.COMMAND,
    standalone.COMMAND,
    gateway.COMMAND,
    check_remote.COMMAND,
)
COMMAND_GROUP = "tierkeeper.commands"
"""Entry-point group of installed packages' subcommands; each entry point is a ``register`` function."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tierkeeper",
        description="Kafka tiered storage: tier rolled segments to object storage, read them back, "
        "keep replica fetchers balanced.",
    )
    parser.add_argument("--version", action="version", version=f"tierkeeper {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in BUILTIN_COMMANDS:
        command.register(subparsers)
    for entry in sorted(entry_points(group=COMMAND_GROUP), key=lambda e: e.name):
        try:
            plugin: Register = entry.load()
        except ImportError as exc:
            # A broken optional part must not take the storage commands down with it.
            print(f"tierkeeper: command {entry.name!r} unavailable: {exc}", file=sys.stderr)
            continue
        plugin(subparsers)
    return parser


SIGPIPE_STATUS = 128 + 13


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        _check_topic_flags(args)
        code = int(handler(args))
        sys.stdout.flush()  # here, not at exit: a reader gone by then is a BrokenPipeError below
        return code
    except BrokenPipeError:
        # Whoever read our output stopped (`tierkeeper read ... | head`): end quietly, as cat does, with
        # the status of a process ended by SIGPIPE. Nothing more may reach the closed pipe, not even the
        # interpreter's last flush.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return SIGPIPE_STATUS
    except TierkeeperError as exc:
        print(f"tierkeeper {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"tierkeeper {args.command}: interrupted", file=sys.stderr)
        return 130


def _check_topic_flags(args: argparse.Namespace) -> None:
    """Topic names from the command line are checked before any command uses them (a name Kafka does
    not allow could otherwise only ever match nothing, or reach a key: storage_core/remote/layout.py)."""
    from storage_core.remote.layout import check_topic

    for flag in ("topic", "delete_topic", "exclude_topic"):
        value = getattr(args, flag, None)
        for topic in value if isinstance(value, list) else [value] if value is not None else []:
            check_topic(topic)


if __name__ == "__main__":
    sys.exit(main())
