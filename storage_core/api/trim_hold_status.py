"""What holds a TieredTopic's local trim, as its status shows it (``status.trimHold``): written from the
last cleanup's report by :mod:`storage_core.reconcile.trim_holds`.

Kept small on purpose: a topic of thousands of partitions read by dozens of groups must not make a status
of megabytes. The counts are exact; the lists name the partitions and groups that matter most (a bound
overridden first, then the groups holding the trim furthest back), and say how many more there are.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from storage_core.api.rules import ApiModel

TRIM_HELD = "TrimHeld"
"""The TieredTopic condition saying whether (and why) direct readers hold its local trim."""
MAX_PARTITIONS = 16
"""Partitions listed in ``status.trimHold.partitions``."""
MAX_GROUPS = 3
"""Groups listed per partition in ``heldBy`` and in ``overridden``."""


class HeldBy(ApiModel):
    """A consumer group whose committed offset holds the partition's trim."""

    group: str = Field(description="The consumer group.")
    offset: int = Field(description="Its committed offset: the brokers keep every record from here on.")


OverrideReason = Literal["maxAge", "maxBytes", "retention", "kafkaRetention"]
"""Why the trim passes a holding group's offset: the ``trimHold`` bound by age or bytes; the topic's
remote retention expired those offsets (they leave the brokers as Kafka's retention would delete them);
or Kafka's own retention.ms / retention.bytes would delete them first (``kafkaRetention``: a log start
Tierkeeper did not set expires the remote copies below it, so holding past it would cost the tier)."""


class MissedOffsets(ApiModel):
    """A group the hold's bound no longer waits for: it will not find offsets [offset, to) on the brokers
    (they stay readable in the remote tier, through the gateway)."""

    group: str = Field(description="The consumer group.")
    offset: int = Field(description="Its committed offset.")
    to: int = Field(description="Where the trim went: offsets from offset up to here are gone locally.")
    reason: OverrideReason = Field(
        description="Why the trim passed the group: a bound (maxAge, maxBytes) exceeded; the remote "
        "retention expired those offsets (retention); or Kafka's own retention would delete them first "
        "(kafkaRetention)."
    )


class PartitionTrimHold(ApiModel):
    """What held (or no longer holds) one partition's trim at the last cleanup."""

    partition: int = Field(ge=0, description="Partition number.")
    window_to: int | None = Field(
        default=None, description="Where the local window alone would have trimmed to (null: nowhere)."
    )
    trimmed_to: int | None = Field(
        default=None, description="Where the trim went, held back (null: not trimmed this time)."
    )
    held_by: list[HeldBy] = Field(
        default_factory=list, description="Groups holding the trim, the furthest back first."
    )
    overridden: list[MissedOffsets] = Field(
        default_factory=list, description="Groups the bound stopped waiting for, with the offsets they miss."
    )
    more_groups: int = Field(default=0, ge=0, description="Groups of this partition not listed here.")


class TrimHoldStatus(ApiModel):
    """What holds the topic's local trim (spec.trimHold, else the cluster's), from the last cleanup."""

    held_partitions: int = Field(
        default=0, ge=0, description="Partitions whose trim a direct reader holds below the local window."
    )
    overridden_partitions: int = Field(
        default=0, ge=0, description="Partitions where the bound let the trim pass a group's offset."
    )
    partitions: list[PartitionTrimHold] = Field(
        default_factory=list,
        description="The partitions held or overridden (bounds overridden first, then the longest holds).",
    )
    more_partitions: int = Field(default=0, ge=0, description="Held or overridden partitions not listed.")
    unknown: str | None = Field(
        default=None,
        description="Why the groups' offsets were not known: the trim was kept where it was (never trimmed "
        "on missing information).",
    )
    checked_at: str | None = Field(default=None, description="RFC 3339 time of the cleanup it is from.")
