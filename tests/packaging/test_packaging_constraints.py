"""constraints.txt pins every runtime dependency exactly, so an image build is reproducible."""

from __future__ import annotations

import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from harness.paths import REPO_ROOT

CONSTRAINTS = REPO_ROOT / "constraints.txt"


def pins(text: str) -> dict[str, Version]:
    out: dict[str, Version] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep and version and ";" not in line, (
            f"constraints.txt: {line!r} is not an exact 'name==version' pin"
        )
        key = canonicalize_name(name)
        assert key not in out, f"constraints.txt pins {name} twice"
        out[key] = Version(version)
    return out


def unpinned(dependencies: list[str], pinned: dict[str, Version]) -> list[str]:
    """Dependencies with no pin, or whose pin falls outside the range pyproject.toml allows."""
    problems = []
    for dependency in dependencies:
        requirement = Requirement(dependency)
        version = pinned.get(canonicalize_name(requirement.name))
        if version is None:
            problems.append(f"{requirement.name} is not pinned (run `make constraints`)")
        elif not requirement.specifier.contains(version, prereleases=True):
            problems.append(
                f"{requirement.name}=={version} is outside pyproject.toml's {requirement.specifier}"
            )
    return problems


def project_dependencies() -> list[str]:
    with open(REPO_ROOT / "pyproject.toml", "rb") as f:
        deps: list[str] = tomllib.load(f)["project"]["dependencies"]
    return deps


def test_every_runtime_dependency_is_pinned_within_its_range() -> None:
    assert unpinned(project_dependencies(), pins(CONSTRAINTS.read_text())) == []


def test_a_missing_or_out_of_range_pin_is_reported() -> None:
    pinned = pins(CONSTRAINTS.read_text())
    del pinned["kopf"]
    pinned["pydantic"] = Version("1.10.0")
    assert unpinned(project_dependencies(), pinned) == [
        "kopf is not pinned (run `make constraints`)",
        "pydantic==1.10.0 is outside pyproject.toml's <3,>=2.6",
    ]


def test_pyspark_matches_the_spark_the_tests_run() -> None:
    assert pins(CONSTRAINTS.read_text())["pyspark"] == Version("4.1.1")


def test_the_project_itself_is_not_pinned() -> None:
    # The wheel being installed is the project; a pin on it would fight the wheel's own version.
    assert "tierkeeper" not in pins(CONSTRAINTS.read_text())
