"""A ``tierkeeper`` verb as data: each subcommand module declares one :class:`Subcommand` and
:func:`storage_core.cli.main.build_parser` adds them all, so the module holds only its flags and its
handler."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Subcommand:
    """What ``tierkeeper --help`` lists (``name``, ``help``) and what ``tierkeeper <name> --help`` shows
    and runs."""

    name: str
    help: str
    add_args: Callable[[argparse.ArgumentParser], None]
    """Adds the verb's flags (and, for a verb with verbs of its own, those verbs and their handlers)."""
    run: Callable[[argparse.Namespace], int] | None
    """The handler ``main`` calls with the parsed flags; None where each sub-verb names its own."""
    description: str | None = None
    formatter_class: type[argparse.HelpFormatter] = argparse.HelpFormatter
    """``argparse.RawDescriptionHelpFormatter`` keeps a description's own line breaks (the gateway's)."""

    def register(self, subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        parser = subparsers.add_parser(
            self.name, help=self.help, description=self.description, formatter_class=self.formatter_class
        )
        self.add_args(parser)
        if self.run is not None:
            parser.set_defaults(handler=self.run)
