"""Decide whether a custom resource's spec is usable, and the status that says so.

Pure functions: the kopf handlers feed them what they observed (spec, generation, the previous
conditions, the time) and write the returned status once. Nothing here talks to Kubernetes.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from tierkeeper_operator.models import Condition, Phase, ResourceStatus

SpecT = TypeVar("SpecT", bound=BaseModel)

ACCEPTED_CONDITION = "Accepted"
REASON_VALID = "SpecValid"
REASON_INVALID = "InvalidSpec"
MAX_LISTED_ERRORS = 3


@dataclass(frozen=True)
class Verdict(Generic[SpecT]):
    """The parsed spec, or the one-line reason it could not be parsed."""

    spec: SpecT | None
    problem: str | None

    @property
    def valid(self) -> bool:
        return self.problem is None


def _path(root: str, loc: Sequence[int | str]) -> str:
    path = root
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _one_error(root: str, error: Mapping[str, Any]) -> str:
    kind = error["type"]
    where = _path(root, error["loc"])
    if kind == "missing":
        return f"{where}: required field is missing"
    if kind == "extra_forbidden":
        return f"{where}: unknown field"
    message = str(error["msg"]).removeprefix("Value error, ")
    if not error["loc"]:
        # Cross-field rules name their fields in the message itself.
        return f"{where}: {message}"
    value = error.get("input")
    if isinstance(value, str | int | float | bool) or value is None:
        return f"{where}: {message} (got {value!r})"
    return f"{where}: {message} (got {type(value).__name__})"


def describe_errors(exc: ValidationError, root: str = "spec") -> str:
    """One line naming each bad field, e.g. ``spec.copy.intervalSeconds: ... (got -5)``."""
    errors = exc.errors(include_url=False)
    parts = [_one_error(root, error) for error in errors[:MAX_LISTED_ERRORS]]
    if len(errors) > MAX_LISTED_ERRORS:
        parts.append(f"and {len(errors) - MAX_LISTED_ERRORS} more")
    return "; ".join(part.replace("\n", " ") for part in parts)


def assess(model: type[SpecT], spec: Mapping[str, Any]) -> Verdict[SpecT]:
    try:
        return Verdict(spec=model.model_validate(dict(spec)), problem=None)
    except ValidationError as exc:
        return Verdict(spec=None, problem=describe_errors(exc))


def _rfc3339(now: datetime.datetime) -> str:
    return now.astimezone(datetime.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def accepted_condition(
    verdict: Verdict[Any],
    generation: int | None,
    previous: Sequence[Mapping[str, Any]],
    now: datetime.datetime,
) -> Condition:
    """The Accepted condition; its transition time moves only when its status flips."""
    status: Literal["True", "False"] = "True" if verdict.valid else "False"
    transition = _rfc3339(now)
    for old in previous:
        if (
            old.get("type") == ACCEPTED_CONDITION
            and old.get("status") == status
            and old.get("lastTransitionTime")
        ):
            transition = str(old["lastTransitionTime"])
    return Condition(
        type=ACCEPTED_CONDITION,
        status=status,
        reason=REASON_VALID if verdict.valid else REASON_INVALID,
        message="spec is valid" if verdict.problem is None else verdict.problem,
        last_transition_time=transition,
        observed_generation=generation,
    )


def status_after_assessment(
    verdict: Verdict[Any],
    generation: int | None,
    previous_conditions: Sequence[Mapping[str, Any]],
    now: datetime.datetime,
) -> dict[str, Any]:
    """The whole ``status`` to write: phase, message, observedGeneration and conditions.

    Conditions of other types (added by later stages) are carried over untouched.
    """
    condition = accepted_condition(verdict, generation, previous_conditions, now)
    status = ResourceStatus(
        phase=Phase.ACCEPTED if verdict.valid else Phase.INVALID,
        message="spec accepted" if verdict.problem is None else verdict.problem,
        observed_generation=generation,
        conditions=[condition],
    ).model_dump(by_alias=True, mode="json")
    # Raw copies, not re-validated: a malformed foreign condition must not wedge this handler.
    status["conditions"].extend(dict(c) for c in previous_conditions if c.get("type") != ACCEPTED_CONDITION)
    return status
