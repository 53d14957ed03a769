"""``HOST:PORT`` text, parsed one way for every part that reads it: the gateway's listen flags and its
``--bootstrap-servers``, and the adapters that speak to a bootstrap address directly (feature levels, the
cluster-wide fetcher default)."""

from __future__ import annotations

from storage_core.errors import ConfigError
from storage_core.gateway.addresses import MAX_PORT, Address


def parse_address(text: str, what: str) -> Address:
    """``HOST:PORT`` as Kafka's ``bootstrap.servers`` and the gateway's listen flags write it: an IPv6 host
    in brackets, a port from 0 to 65535, librdkafka's ``PLAINTEXT://`` prefix dropped. An empty host stays
    empty (a listener's "every address"). ``what`` names the value in the one-line error."""
    text = text.strip()
    host, sep, port = text.removeprefix("PLAINTEXT://").rpartition(":")
    if not sep or not port.isascii() or not port.isdigit() or int(port) > MAX_PORT:
        raise ConfigError(f"{what} {text!r}: expected HOST:PORT")
    return Address(host.strip("[]"), int(port))


def parse_addresses(servers: str, what: str = "bootstrap server") -> list[Address]:
    """A comma-separated list of :func:`parse_address` (``bootstrap.servers``); blank items are skipped."""
    return [parse_address(item, what) for item in servers.split(",") if item.strip()]
