"""Read a Dockerfile into stages and check the image rules of issue 18 on it.

Not a full Dockerfile parser: enough of the syntax our Dockerfile uses (line continuations, comments,
``ARG`` defaults substituted into ``FROM``, ``FROM ... AS name``, exec- and shell-form instructions).
Each rule returns a list of problems (empty when the rule holds), so a test can show a rule catching a
deliberately broken Dockerfile as well as passing the real one.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

# name:tag@sha256:<64 hex>, where the tag starts with an exact version (at least major.minor.patch).
PINNED_IMAGE = re.compile(r"^[a-z0-9./-]+:(?P<tag>\d+\.\d+\.\d+[\w.-]*)@sha256:[0-9a-f]{64}$")
COMPILERS = ("gcc", "g++", "cc ", "clang", "build-essential", "make ", "cmake", "rustc", "cargo", "-dev")
OCI_LABELS = ("title", "description", "source", "licenses", "version", "revision", "created")
FINAL_TARGETS = ("operator", "pipeline")


@dataclass
class Instruction:
    keyword: str
    args: str


@dataclass
class Stage:
    name: str
    base: str  # the resolved image reference, or the name of an earlier stage
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [i.args for i in self.instructions if i.keyword == keyword]


@dataclass
class Dockerfile:
    args: dict[str, str]  # global ARG defaults (before the first FROM)
    stages: list[Stage]

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(f"no stage named {name!r}")

    def chain(self, name: str) -> list[Stage]:
        """The stage and the stages it is built FROM, nearest first (images excluded)."""
        names = {s.name for s in self.stages}
        out = [self.stage(name)]
        while out[-1].base in names:
            out.append(self.stage(out[-1].base))
        return out


def logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or not stripped:
            continue  # comments and blank lines may sit inside a continued instruction
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    if current:
        lines.append(current)
    return lines


def parse(text: str) -> Dockerfile:
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical_lines(text):
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        rest = rest.strip()
        if keyword == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = default
        elif keyword == "FROM":
            words = rest.split()
            words = [w for w in words if not w.startswith("--")]
            image = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), ""), words[0])
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else f"stage-{len(stages)}"
            stages.append(Stage(name=name, base=image))
        elif stages:
            stages[-1].instructions.append(Instruction(keyword, rest))
    return Dockerfile(args=args, stages=stages)


def check_pinned_bases(dockerfile: Dockerfile) -> list[str]:
    names = {s.name for s in dockerfile.stages}
    return [
        f"stage {s.name}: base image {s.base!r} is not pinned to an exact version tag and a digest"
        for s in dockerfile.stages
        if s.base not in names and not PINNED_IMAGE.match(s.base)
    ]


def check_targets(dockerfile: Dockerfile) -> list[str]:
    names = [s.name for s in dockerfile.stages]
    problems = [f"no stage named {t!r}" for t in FINAL_TARGETS if t not in names]
    for target in FINAL_TARGETS:
        if any(s.base == target for s in dockerfile.stages):
            problems.append(f"stage {target!r} is a final target but another stage builds on it")
    return problems


def _user_of(chain: list[Stage]) -> str | None:
    for stage in chain:  # nearest stage first: its last USER wins
        users = stage.all("USER")
        if users:
            return users[-1]
    return None


def check_non_root_user(dockerfile: Dockerfile) -> list[str]:
    problems = []
    for target in FINAL_TARGETS:
        user = _user_of(dockerfile.chain(target))
        if user is None:
            problems.append(f"{target}: no USER, so it runs as root")
            continue
        uid, _, gid = user.partition(":")
        if not uid.isdigit() or int(uid) == 0 or (gid and (not gid.isdigit() or int(gid) == 0)):
            problems.append(f"{target}: USER {user} is not a numeric non-root uid[:gid]")
    return problems


def check_final_stages_clean(dockerfile: Dockerfile) -> list[str]:
    """No compilers, no pip and no wheel files in the final targets (their own stages and bases)."""
    problems = []
    for target in FINAL_TARGETS:
        for stage in dockerfile.chain(target):
            for run in stage.all("RUN"):
                if re.search(r"\bpip\b|\bpip3\b", run):
                    problems.append(f"{target}: stage {stage.name} runs pip in a final stage: {run[:80]}")
                for compiler in COMPILERS:
                    if compiler in run + " ":
                        problems.append(
                            f"{target}: stage {stage.name} installs a build tool ({compiler.strip()})"
                        )
            for copy in stage.all("COPY"):
                if ".whl" in copy or "/wheels" in copy or ".cache/pip" in copy:
                    problems.append(f"{target}: stage {stage.name} copies wheels or a pip cache: {copy}")
    return problems


# The install-venv.sh steps that make each target's venv (docker/install-venv.sh).
VENV_STEPS = {"operator": ("deps", "project"), "pipeline": ("deps", "spark", "project")}


_STEP = re.compile(r"install-venv\.sh (\w+) /opt/tierkeeper \S+ \S*constraints\.txt")


def check_constraints_used(dockerfile: Dockerfile) -> list[str]:
    """Each final target's venv is made by install-venv.sh with constraints.txt, each of its steps once:
    the dependencies (and for the pipeline PySpark) and the project, run in the target's own chain of
    stages or in a build stage whose /opt/tierkeeper or /stage tree it copies."""
    problems = []
    for target in FINAL_TARGETS:
        chain = dockerfile.chain(target)
        steps = [m.group(1) for stage in chain for run in stage.all("RUN") if (m := _STEP.search(run))]
        sources = [
            m.group(1)
            for stage in chain
            for copy in stage.all("COPY")
            if (m := re.search(r"--from=(\S+)\s+(?:/opt/tierkeeper|/stage/?)\s", copy + " "))
        ]
        for source in sources:
            runs = [run for stage in dockerfile.chain(source) for run in stage.all("RUN")]
            found = [m.group(1) for run in runs if (m := _STEP.search(run))]
            if not found:
                problems.append(f"{target}: stage {source} does not run install-venv.sh with constraints.txt")
            steps += found[:1]  # the step of the copied stage itself (its chain is nearest first)
        if sorted(steps) != sorted(VENV_STEPS[target]):
            problems.append(
                f"{target}: its venv is made by install-venv.sh steps {steps}, "
                f"expected {list(VENV_STEPS[target])} (copied from {sources})"
            )
    return problems


def labels(chain: list[Stage]) -> dict[str, str]:
    out: dict[str, str] = {}
    for stage in reversed(chain):  # farthest base first, so nearer stages override
        for args in stage.all("LABEL"):
            for word in shlex.split(args):
                key, _, value = word.partition("=")
                out[key] = value
    return out


def check_oci_labels(dockerfile: Dockerfile) -> list[str]:
    problems = []
    for target in FINAL_TARGETS:
        found = labels(dockerfile.chain(target))
        for name in OCI_LABELS:
            value = found.get(f"org.opencontainers.image.{name}", "")
            if not value.strip():
                problems.append(f"{target}: label org.opencontainers.image.{name} missing or empty")
    return problems


def check_no_jvm_in_operator(dockerfile: Dockerfile) -> list[str]:
    bad = [
        copy
        for stage in dockerfile.chain("operator")
        for copy in stage.all("COPY")
        if "java" in copy or "jre" in copy.lower()
    ]
    return [f"operator: copies a Java runtime: {c}" for c in bad]


ALL_RULES = (
    check_pinned_bases,
    check_targets,
    check_non_root_user,
    check_final_stages_clean,
    check_constraints_used,
    check_oci_labels,
    check_no_jvm_in_operator,
)


def problems(text: str) -> list[str]:
    dockerfile = parse(text)
    return [problem for rule in ALL_RULES for problem in rule(dockerfile)]
