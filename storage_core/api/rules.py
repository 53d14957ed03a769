"""Cross-field rules declared once: the CEL text the API server evaluates at admission and the Python check
the models run, side by side.

A model lists its rules in ``RULES``; :class:`ApiModel` runs every check after parsing (the message of the
first broken rule becomes the validation error) and puts every rule into the model's JSON Schema as
``x-kubernetes-validations``, from where the CRD generator copies it. A unit test evaluates each CEL text
against the same cases as its Python check, so the two cannot drift apart.

CEL sees the object as stored (defaults are not applied by the API server, see crdgen), so a rule about a
defaulted field reads it through :func:`cel_or_default` with the same default the model uses.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic.alias_generators import to_camel


@dataclass(frozen=True)
class Rule:
    """One cross-field rule of one object."""

    cel: str
    """CEL expression with ``self`` bound to the object; true means valid."""
    message: str
    """What the API server and the operator say when the rule is broken."""
    check: Callable[[Any], bool]
    """The same rule over the parsed model (defaults applied); true means valid."""


def cel_or_default(field: str, default: object) -> str:
    """CEL for "the field's value, or the model's default when it is absent"."""
    return f"(has(self.{field}) ? self.{field} : {json.dumps(default)})"


def _add_rules(schema: dict[str, Any], model: type[BaseModel]) -> None:
    rules: tuple[Rule, ...] = getattr(model, "RULES", ())
    if rules:
        schema["x-kubernetes-validations"] = [{"rule": r.cel, "message": r.message} for r in rules]


class ApiModel(BaseModel):
    """Base of every API model: camelCase on the wire, unknown fields rejected, immutable, rules checked.

    A real API server prunes unknown fields before we see them; rejecting them here still catches typos
    (``localRetentionMS``) in standalone manifests and wherever pruning is off.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        json_schema_extra=_add_rules,
    )
    RULES: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _cross_field_rules(self) -> ApiModel:
        for rule in type(self).RULES:
            if not rule.check(self):
                raise ValueError(rule.message)
        return self
