"""The ``tierkeeper operator`` subcommand, found by the CLI through the ``tierkeeper.commands`` group."""

from __future__ import annotations

import argparse

from tierkeeper_operator.run import add_arguments, run, settings_from_args


def _handle(args: argparse.Namespace) -> int:
    return run(settings_from_args(args))


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "operator",
        help="run the Kubernetes operator for TieredTopic and TieredBroker resources",
        description="Watch TieredTopic and TieredBroker resources and tier their topics with copy and "
        "cleanup Jobs (replicas elect the active one with kopf peering).",
    )
    add_arguments(parser)
    parser.set_defaults(handler=_handle)
