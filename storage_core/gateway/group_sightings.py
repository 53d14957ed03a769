"""What a gateway tells the trim about the consumer groups it serves: one record per (group, gateway) on a
small compacted Kafka topic (pure: the record format and what a reader makes of it).

Why a topic: every gateway replica already has a Kafka connection and nothing else in common; the cleanup
(in a Job, in ``tierkeeper standalone`` and in ``tierkeeper cleanup``) already talks to the same Kafka and
needs no address of any gateway pod, so a replica that was rescheduled, scaled away or is behind a
NetworkPolicy is still accounted for, and what it last said survives its restart. Compaction keeps one
record per key: the topic stays the size of (groups x gateway replicas).

A record says: at ``seen_ms`` gateway ``gateway`` carried requests of these group members. A gateway
writes a group's record again at most every ``REPUBLISH_MS`` while it keeps serving it, and once more
with no members when the group's last member left through it: not a tombstone, so an empty group is still
known to have been read through a gateway (group_writes.py says why; the topic's retention removes such
records in the end). The gateways write no tombstones.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SIGHTINGS_TOPIC = "__tierkeeper_gateway_groups"
"""The compacted topic gateways write their group sightings to (``cleanup.policy=compact``)."""
FORMAT_VERSION = 1
REPUBLISH_MS = 30_000
"""How often a gateway rewrites the record of a group it still serves."""
FRESH_MS = 3 * REPUBLISH_MS
"""A sighting younger than this shows the members live: two missed republishes are tolerated."""

GATEWAY_ID_ENV = "TIERKEEPER_GATEWAY_ID"
"""Where ``tierkeeper gateway`` finds its id (``GroupSighting.gateway``) without ``--gateway-id``: the
operator's gateway pods get their pod name there (the downward API)."""

GroupProtocol = Literal["classic", "consumer", "share"]


class GroupSighting(BaseModel):
    """One gateway's view of one group, as the value of its record."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    v: int = FORMAT_VERSION
    group: str
    gateway: str = Field(description="The gateway replica's id (its pod name, or host:port).")
    protocol: GroupProtocol = "classic"
    members: tuple[str, ...] = ()
    """Member ids (and group.instance.ids of static members) whose requests this gateway carried."""
    seen_ms: int


def sighting_key(group: str, gateway: str) -> bytes:
    """The record key: one record per (group, gateway replica)."""
    return json.dumps([group, gateway], separators=(",", ":")).encode()


def encode_sighting(sighting: GroupSighting) -> tuple[bytes, bytes]:
    """(key, value) of a sighting's record."""
    return sighting_key(sighting.group, sighting.gateway), sighting.model_dump_json().encode()


def decode_sighting(
    key: bytes | None, value: bytes | None
) -> tuple[tuple[str, str], GroupSighting | None] | None:
    """((group, gateway), the sighting, or None for a tombstone); None for a record that is not ours
    (malformed or of a newer format: skipped, never fatal to a cleanup)."""
    try:
        group, gateway = json.loads(key or b"")
        if not isinstance(group, str) or not isinstance(gateway, str):
            return None
        if value is None:
            return (group, gateway), None
        sighting = GroupSighting.model_validate_json(value)
    except (ValueError, TypeError):
        return None
    if sighting.v != FORMAT_VERSION or sighting.group != group or sighting.gateway != gateway:
        return None
    return (group, gateway), sighting


def latest_sightings(
    records: Iterable[tuple[bytes | None, bytes | None]],
) -> dict[str, list[GroupSighting]]:
    """The topic read from its start to its end, in order: each group's live sightings (one per gateway;
    a later record of a key replaces the earlier one, a tombstone removes it)."""
    by_key: dict[tuple[str, str], GroupSighting] = {}
    for key, value in records:
        decoded = decode_sighting(key, value)
        if decoded is None:
            continue
        ident, sighting = decoded
        if sighting is None:
            by_key.pop(ident, None)
        else:
            by_key[ident] = sighting
    out: dict[str, list[GroupSighting]] = {}
    for (group, _), sighting in sorted(by_key.items()):
        out.setdefault(group, []).append(sighting)
    return out


def direct_members(
    members: Iterable[str], sightings: Mapping[str, list[GroupSighting]], group: str, now_ms: int
) -> set[str]:
    """The group's current members (member ids or group.instance.ids, as Kafka describes them) that no
    fresh gateway sighting carried: they read the brokers directly."""
    through = {m for s in sightings.get(group, ()) if now_ms - s.seen_ms <= FRESH_MS for m in s.members}
    return {m for m in members if m not in through}
