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

from typing import Annotated

from pydantic import Field

from storage_core.api.fields import RetentionBytes, RetentionMs
from storage_core.api.rules import ApiModel

DEFAULT_MAX_AGE_MS = 7 * 24 * 3600 * 1000
DEFAULT_INACTIVE_GROUP_MS = 7 * 24 * 3600 * 1000

GroupPattern = Annotated[
    str,
    Field(
        min_length=1,
        max_length=255,
        pattern=r"^[^*]+\*?$|^\*$",
        description="A consumer group id, or a prefix ending in * (prefix*), or * for every group.",
    ),
]


class TrimHold(ApiModel):
    """How consumer groups that read the brokers directly (not through a gateway) hold the local trim."""

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
    ignore_groups: list[GroupPattern] = Field(
        default_factory=list,
        max_length=100,
        description="Groups that never hold the trim: ids, or prefixes ending in * (prefix*).",
    )

    def ignores(self, group: str) -> bool:
        """Whether ``group`` is one of ``ignore_groups`` (an id, or a prefix* pattern)."""
        return any(group.startswith(p[:-1]) if p.endswith("*") else group == p for p in self.ignore_groups)
