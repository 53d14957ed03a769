"""One parser reads every ``HOST:PORT``: the gateway's flags and the adapters that dial a bootstrap
address."""

from __future__ import annotations

import pytest

from storage_core.errors import ConfigError
from storage_core.gateway.addresses import Address
from storage_core.gateway.host_port import parse_address, parse_addresses


def test_bootstrap_lists_as_kafka_writes_them() -> None:
    servers = " kafka-0:9092, PLAINTEXT://kafka-1:9093 ,[::1]:9094,,"
    assert parse_addresses(servers) == [
        Address("kafka-0", 9092),
        Address("kafka-1", 9093),
        Address("::1", 9094),
    ]


def test_a_listen_address_may_leave_the_host_out() -> None:
    assert parse_address(":0", "--listen") == Address("", 0)


@pytest.mark.parametrize("text", ["kafka-0", "kafka-0:", "kafka-0:x", "kafka-0:65536", "kafka-0:９０"])
def test_anything_else_is_one_line_naming_the_value(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_addresses(f"ok:1,{text}")
    assert str(caught.value) == f"bootstrap server {text!r}: expected HOST:PORT"


@pytest.mark.parametrize("text", ["kafka-0:9092", "[::1]:9094", "[fe80::1%eth0]:0", "10.0.0.1:65535"])
def test_an_address_is_written_as_it_is_read(text: str) -> None:
    assert str(parse_address(text, "broker")) == text
