"""The built-in verbs as their modules declare them (storage_core/cli/subcommand.py): each is on the parser
once, in the table's order, with its help and description, and runs its own handler."""

from __future__ import annotations

import argparse

import pytest

from storage_core.cli import gateway
from storage_core.cli.main import BUILTIN_COMMANDS, build_parser
from storage_core.cli.subcommand import Subcommand


def _verbs(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_declared_verb_is_on_the_parser_once_in_the_table_order() -> None:
    names = [command.name for command in BUILTIN_COMMANDS]
    assert len(set(names)) == len(names)
    # Installed packages' verbs (the operator) come after the built-in ones.
    assert list(_verbs(build_parser()))[: len(names)] == names


@pytest.mark.parametrize("command", BUILTIN_COMMANDS, ids=lambda c: c.name)
def test_a_verb_runs_its_handler_or_each_of_its_own_verbs_names_one(command: Subcommand) -> None:
    parser = _verbs(build_parser())[command.name]
    assert parser.description == command.description
    if command.run is not None:
        assert parser.get_default("handler") is command.run
    else:
        assert parser.get_default("handler") is None
        handlers = [verb.get_default("handler") for verb in _verbs(parser).values()]
        assert handlers and all(callable(h) for h in handlers)


def test_the_gateway_keeps_its_description_s_line_breaks(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["gateway", "--help"])
    out = capsys.readouterr().out
    assert gateway.__doc__ is not None
    assert "\n".join(gateway.__doc__.splitlines()[:2]) in out
