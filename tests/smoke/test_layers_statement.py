"""One statement of the layers: ``.importlinter``'s layers contract, which ``lint-imports`` checks the code
against. storage_core/DESIGN.md quotes it whole, the README its modules, and each layered package's
docstring its layer's name (the ``#`` line above it); these tests fail when a copy drifts from it."""

from __future__ import annotations

import ast
import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _written_layers() -> list[str]:
    """The layers value as written in ``.importlinter``, its ``#`` lines (the layers' names) included."""
    text = (ROOT / ".importlinter").read_text()
    section = text.split("[importlinter:contract:layers]\n", 1)[1].split("\n[", 1)[0]
    value = section.split("\nlayers =\n", 1)[1]
    return [line.strip() for line in value.splitlines() if line.strip()]


def _modules(line: str) -> list[str]:
    return [name.strip() for name in line.split("|")]


def test_the_written_layers_are_the_ones_import_linter_reads() -> None:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    read = [line.strip() for line in config["importlinter:contract:layers"]["layers"].splitlines() if line]
    assert [line for line in _written_layers() if not line.startswith("#")] == read
    assert _written_layers()[0].startswith("#"), "every layer has a name above it"


def test_the_storage_core_design_note_quotes_the_layers_whole() -> None:
    design = (ROOT / "storage_core" / "DESIGN.md").read_text()
    section = design.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    quoted = section.split("```text\n", 1)[1].split("```", 1)[0]
    assert [line.strip() for line in quoted.splitlines() if line.strip()] == _written_layers()


def test_the_readme_names_the_layers_modules_in_order() -> None:
    readme = " ".join((ROOT / "README.md").read_text().split())
    chains = re.findall(r"`tierkeeper_operator`(?: -> `[^`]+`)+", readme)
    assert len(chains) == 1, chains
    quoted = [name.strip("`") for name in chains[0].split(" -> ")]
    layers = [line for line in _written_layers() if not line.startswith("#")]
    assert quoted == [" | ".join(m.removeprefix("storage_core.") for m in _modules(line)) for line in layers]


def _docstring(module: str) -> str:
    if module == "tierkeeper_operator":
        path = ROOT / "operator" / "tierkeeper_operator" / "__init__.py"
    else:
        base = ROOT.joinpath(*module.split("."))
        path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    return " ".join((ast.get_docstring(ast.parse(path.read_text())) or "").split())


def test_each_layered_package_names_its_layer_in_its_docstring() -> None:
    missing = []
    name = ""
    for line in _written_layers():
        if line.startswith("#"):
            name = line.removeprefix("#").strip()
            continue
        missing += [m for m in _modules(line) if f"Layer: {name} (" not in _docstring(m)]
    assert missing == [], "these docstrings do not say 'Layer: <name> (...' with their layer's name"
