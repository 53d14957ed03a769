"""Certificates and Kafka client properties read again when their files are replaced
(storage_core/gateway_server/reloading.py), and librdkafka's TLS properties as a Python context
(storage_core/adapters/kafka_tls.py): no broker needed."""

from __future__ import annotations

import asyncio
import ssl
import tempfile
from pathlib import Path

import pytest

from harness.tls import client_certificate, loopback_certificates
from storage_core.adapters.kafka_tls import client_tls, tls_files
from storage_core.errors import ConfigError
from storage_core.gateway_server.reloading import Loaded, Reloading, server_certificate, serving_context


def test_pem_text_and_file_paths_give_the_same_client_certificate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    ca, _, _ = loopback_certificates(tmp_path)
    cert, key = client_certificate(tmp_path, "client")
    (tmp_path / "client.pem").write_text(cert)
    (tmp_path / "client-key.pem").write_text(key)
    by_text = client_tls(
        {
            "security.protocol": "SSL",
            "ssl.ca.pem": ca.read_text(),
            "ssl.certificate.pem": cert,
            "ssl.key.pem": key,
        }
    )
    by_path = {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(ca),
        "ssl.certificate.location": str(tmp_path / "client.pem"),
        "ssl.key.location": str(tmp_path / "client-key.pem"),
    }
    assert by_text is not None and client_tls(by_path) is not None
    assert by_text.get_ca_certs() == client_tls(by_path).get_ca_certs()  # type: ignore[union-attr]
    assert tls_files(by_path) == [str(ca), str(tmp_path / "client.pem"), str(tmp_path / "client-key.pem")]
    assert client_tls({"security.protocol": "SASL_PLAINTEXT"}) is None
    assert not list(scratch.iterdir()), "the key's temporary copy was left behind"


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"ssl.keystore.location": "/x.p12"}, "ssl.keystore.location (a PKCS#12 keystore) is not read here"),
        ({"ssl.certificate.pem": "x"}, "ssl.certificate.pem and ssl.key.pem go together"),
        ({"ssl.ca.location": "/nonexistent/ca.pem"}, "ssl.ca.location: No such file or directory"),
        ({"ssl.ca.pem": "not a certificate"}, "ssl.ca.pem:"),
    ],
)
def test_unusable_tls_properties_are_one_line_naming_the_property(config: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        client_tls({"security.protocol": "SSL", **config})
    assert says in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_key_that_is_not_the_certificates_is_refused_without_its_text(tmp_path: Path) -> None:
    loopback_certificates(tmp_path)
    cert, _ = client_certificate(tmp_path, "one")
    _, other_key = client_certificate(tmp_path, "two")
    with pytest.raises(ConfigError) as raised:
        client_tls({"security.protocol": "SSL", "ssl.certificate.pem": cert, "ssl.key.pem": other_key})
    assert "ssl.certificate.pem/ssl.key.pem" in str(raised.value)
    assert "BEGIN" not in str(raised.value)


def test_reloading_builds_again_only_on_a_change_and_keeps_the_last_good_value(tmp_path: Path) -> None:
    source = tmp_path / "value"
    source.write_text("1")
    outcomes: list[tuple[str, bool]] = []

    def load() -> Loaded[int]:
        return Loaded(int(source.read_text()), [str(source), str(tmp_path)])

    value = Reloading("the number", load, outcome=lambda what, ok: outcomes.append((what, ok)))
    assert value.current == 1 and not value.refresh()
    replacement = tmp_path / "value.new"
    replacement.write_text("2")
    replacement.replace(source)  # a new inode, as a Secret volume's swap gives
    assert value.refresh() and value.current == 2
    assert not value.refresh(), "nothing changed since"
    source.write_text("not a number")
    assert not value.refresh() and value.current == 2, "a broken file keeps the previous value"
    assert not value.refresh(), "the same broken file is not loaded again and again"
    source.write_text("3")
    assert value.refresh() and value.current == 3
    assert outcomes == [("the number", True), ("the number", False), ("the number", True)]


def test_a_listener_serves_a_replaced_certificate_to_new_connections_and_keeps_old_ones(
    tmp_path: Path,
) -> None:
    first_ca, first_cert, first_key = loopback_certificates(tmp_path / "one")
    second_ca, second_cert, second_key = loopback_certificates(tmp_path / "two")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(first_cert.read_bytes())
    key.write_bytes(first_key.read_bytes())
    certificate = Reloading("cert", lambda: server_certificate(str(cert), str(key)))

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            writer.write(line)
            await writer.drain()
        writer.close()

    async def connect(port: int, ca: Path) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(
            "127.0.0.1", port, ssl=ssl.create_default_context(cafile=str(ca)), server_hostname="127.0.0.1"
        )

    async def scenario() -> None:
        server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=serving_context(certificate))
        port = server.sockets[0].getsockname()[1]
        old_reader, old_writer = await connect(port, first_ca)
        (tmp_path / "tls.crt.new").write_bytes(second_cert.read_bytes())
        (tmp_path / "tls.key.new").write_bytes(second_key.read_bytes())
        (tmp_path / "tls.crt.new").replace(cert)
        (tmp_path / "tls.key.new").replace(key)
        assert certificate.refresh()
        with pytest.raises(ssl.SSLCertVerificationError):
            await connect(port, first_ca)
        new_reader, new_writer = await connect(port, second_ca)
        for reader, writer in ((old_reader, old_writer), (new_reader, new_writer)):
            writer.write(b"ping\n")
            assert await reader.readline() == b"ping\n"
            writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(scenario())
