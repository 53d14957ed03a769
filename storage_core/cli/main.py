"""The ``tierkeeper`` console script: one parser, one subcommand module per verb.

Each subcommand module exposes ``register(subparsers)``, which adds its parser and sets
``handler`` to a function ``(argparse.Namespace) -> int``. Modules import heavy libraries inside
their handlers so ``tierkeeper --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from storage_core import __version__
from storage_core.errors import TierkeeperError

# Subcommand modules, in the order their verbs appear in --help.
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "storage_core.cli.copy",
    "storage_core.cli.read",
    "storage_core.cli.ls",
    "storage_core.cli.cleanup",
    "storage_core.cli.recover",
    "storage_core.cli.rebuild",
    "storage_core.cli.fetchers",
    "storage_core.cli.standalone",
    "tierkeeper_operator.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tierkeeper",
        description="Kafka tiered storage: tier rolled segments to object storage, read them back, "
        "keep replica fetchers balanced.",
    )
    parser.add_argument("--version", action="version", version=f"tierkeeper {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return int(handler(args))
    except TierkeeperError as exc:
        print(f"tierkeeper {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"tierkeeper {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
