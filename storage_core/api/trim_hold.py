"""How far consumer groups that read the brokers directly hold the local trim (``trimHold``).

The local trim moves the brokers' log start for every reader. A group that does not read through a
gateway still needs the brokers' copy of everything from its committed offset on, so the trim waits for
it, within the bound set here: past ``maxAgeMs`` or ``maxBytes`` of held data the trim proceeds and the
group is named in a Warning event, the status and a metric with the offsets it will miss.

The defaults follow Kafka's own: 7 days of held data is Kafka's default ``retention.ms``, so a direct
reader is never worse off than on a cluster without Tierkeeper at Kafka's defaults; and a group with no
members stops holding after 7 days, Kafka's default ``offsets.retention.minutes``, after which Kafka itself
forgets an empty group's committed offsets.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, ClassVar

from pydantic import AfterValidator, Field

from storage_core.api.fields import RetentionBytes, RetentionMs
from storage_core.api.rules import ApiModel, Rule, cel_or_default

DEFAULT_MAX_AGE_MS = 7 * 24 * 3600 * 1000
DEFAULT_INACTIVE_GROUP_MS = 7 * 24 * 3600 * 1000

_PATTERN = re.compile(r"[^*]+\*?|\*")
# The same expression for CEL (RE2, unanchored: anchored here). Checked by a rule rather than the item's
# JSON Schema pattern: the API server words a broken pattern as the regular expression itself.
_PATTERN_CEL = "^([^*]+[*]?|[*])$"

GroupPattern = Annotated[
    str,
    Field(
        min_length=1,
        max_length=255,
        description="A consumer group id, or a prefix ending in * (prefix*), or * for every group.",
    ),
]


def _distinct_groups(values: Sequence[str]) -> Sequence[str]:
    # The API server refuses duplicates itself (list type set); this says the same to standalone manifests.
    twice = sorted({v for v in values if values.count(v) > 1})
    if twice:
        raise ValueError(f"ignoreGroups lists {', '.join(twice)} more than once")
    return values


_BOUNDS = ("max_age_ms", "max_bytes", "inactive_group_ms", "ignore_groups")


class TrimHold(ApiModel):
    """How consumer groups that read the brokers directly (not through a gateway) hold the local trim."""

    # What is refused, and why: a setting that can never take effect is a mistake in the manifest, not a
    # preference (as elsewhere in the API, e.g. replicaFetchers.value in mode auto). Negative values
    # other than -1 are refused by the field types already.
    RULES: ClassVar[tuple[Rule, ...]] = (
        Rule(
            # enabled false trims by the window alone: bounds next to it would read as if they applied.
            cel=f"{cel_or_default('enabled', True)} || !(has(self.maxAgeMs) || has(self.maxBytes) || "
            "has(self.inactiveGroupMs) || has(self.ignoreGroups))",
            message="trimHold bounds need the hold enabled (maxAgeMs, maxBytes, inactiveGroupMs and "
            "ignoreGroups apply only while it is; remove them with enabled: false)",
            check=lambda h: h.enabled or not (h.model_fields_set & set(_BOUNDS)),
        ),
        Rule(
            # A bound of 0 holds nothing while still naming every direct group in a Warning each round.
            cel=f"!{cel_or_default('enabled', True)} || ({cel_or_default('maxAgeMs', DEFAULT_MAX_AGE_MS)} "
            f"!= 0 && {cel_or_default('maxBytes', -1)} != 0)",
            message="trimHold.maxAgeMs and maxBytes must not be 0 (0 holds nothing and warns of every "
            "direct group each round; enabled: false trims by the local window alone)",
            check=lambda h: not h.enabled or (h.max_age_ms != 0 and h.max_bytes != 0),
        ),
        Rule(
            cel=f"!has(self.ignoreGroups) || self.ignoreGroups.all(g, g.matches('{_PATTERN_CEL}'))",
            message="trimHold.ignoreGroups takes ids, prefix* or * (group ids, prefixes ending in * such "
            "as connect-*, or * alone: * may stand only at the end)",
            check=lambda h: all(_PATTERN.fullmatch(g) for g in h.ignore_groups),
        ),
    )

    enabled: bool = Field(
        default=True,
        description="Whether direct readers' committed offsets hold the local trim at all. false trims "
        "by the local window alone, as before this setting existed.",
    )
    max_age_ms: RetentionMs = Field(
        default=DEFAULT_MAX_AGE_MS,
        description="The trim never keeps a tiered segment for a group once its newest record is older "
        "than this, in milliseconds; -1: no age bound.",
    )
    max_bytes: RetentionBytes = Field(
        default=-1,
        description="Per-partition bytes of tiered data the hold may keep on the brokers beyond the local "
        "window; -1: no size bound.",
    )
    inactive_group_ms: RetentionMs = Field(
        default=DEFAULT_INACTIVE_GROUP_MS,
        description="A group seen with no members for longer than this stops holding, in milliseconds; "
        "-1: an empty group holds for as long as Kafka keeps its offsets.",
    )
    ignore_groups: Annotated[list[GroupPattern], AfterValidator(_distinct_groups)] = Field(
        default_factory=list,
        max_length=100,
        json_schema_extra={"x-kubernetes-list-type": "set"},
        description="Groups that never hold the trim: ids, or prefixes ending in * (prefix*).",
    )

    def ignores(self, group: str) -> bool:
        """Whether ``group`` is one of ``ignore_groups`` (an id, or a prefix* pattern)."""
        return any(group.startswith(p[:-1]) if p.endswith("*") else group == p for p in self.ignore_groups)
