"""librdkafka's TLS client properties as a Python :class:`ssl.SSLContext`, for the project's own Kafka
protocol clients (the gateway's connections to the brokers, the operator's ApiVersions probe), so that
they reach the brokers with exactly the trust and the client certificate the librdkafka clients get from
the same properties.

Both of librdkafka's ways are read: a path (``ssl.ca.location``, ``ssl.certificate.location``,
``ssl.key.location``) and the PEM text itself (``ssl.ca.pem``, ``ssl.certificate.pem``, ``ssl.key.pem``),
which is how a Kubernetes Secret mounted as one file per property carries a client certificate. A
PKCS#12 keystore (``ssl.keystore.location``) is refused with the properties to use instead, never
silently ignored: brokers that require a client certificate would only fail the handshake later.

The files named are the ones :func:`tls_files` returns: a process that keeps a context watches them and
builds it again when one is replaced (``storage_core/gateway_server/reloading.py``).
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from storage_core.errors import ConfigError

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
PATH_PROPERTIES = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location")


def client_tls(config: Mapping[str, str]) -> ssl.SSLContext | None:
    """The TLS context librdkafka would use for these client properties (None: the protocol has no TLS)."""
    if config.get("security.protocol", "PLAINTEXT").upper() not in TLS_PROTOCOLS:
        return None
    if config.get("ssl.keystore.location"):
        raise ConfigError(
            "ssl.keystore.location (a PKCS#12 keystore) is not read here: give the client certificate as "
            "ssl.certificate.location/ssl.key.location files or ssl.certificate.pem/ssl.key.pem"
        )
    context = ssl.create_default_context()
    ca = config.get("ssl.ca.location")
    if ca and ca != "probe":  # librdkafka's "probe": the system's trust store, which the default holds
        capath = Path(ca).is_dir()
        _loading(
            "ssl.ca.location", lambda: context.load_verify_locations(**{"capath" if capath else "cafile": ca})
        )
    if config.get("ssl.ca.pem"):
        _loading("ssl.ca.pem", lambda: context.load_verify_locations(cadata=config["ssl.ca.pem"]))
    if config.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
        context.check_hostname = False
    # A password always given (empty when none is configured): OpenSSL would otherwise prompt on the
    # terminal for an encrypted key, which a server process must never wait on.
    password = config.get("ssl.key.password") or ""
    if config.get("ssl.certificate.pem") or config.get("ssl.key.pem"):
        if not (config.get("ssl.certificate.pem") and config.get("ssl.key.pem")):
            raise ConfigError("ssl.certificate.pem and ssl.key.pem go together")
        _loading(
            "ssl.certificate.pem/ssl.key.pem",
            lambda: _load_pem_chain(context, config["ssl.certificate.pem"], config["ssl.key.pem"], password),
        )
    elif config.get("ssl.certificate.location"):
        _loading(
            "ssl.certificate.location/ssl.key.location",
            lambda: context.load_cert_chain(
                config["ssl.certificate.location"], config.get("ssl.key.location"), password
            ),
        )
    return context


def tls_files(config: Mapping[str, str]) -> list[str]:
    """The files the TLS context of ``config`` is read from (a CA directory counts as itself)."""
    return [config[name] for name in PATH_PROPERTIES if config.get(name) and config[name] != "probe"]


def _loading(what: str, load: Callable[[], None]) -> None:
    """Run one load step; its failure becomes one line naming the properties (never the key's text)."""
    try:
        load()
    except (OSError, ssl.SSLError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"Kafka TLS client properties: {what}: {reason}") from None


def _load_pem_chain(context: ssl.SSLContext, certificate: str, key: str, password: str) -> None:
    """``load_cert_chain`` from PEM text: Python's ssl loads a client certificate from files only, so the
    text goes through a directory only this process can read, removed at once."""
    with tempfile.TemporaryDirectory(prefix="tierkeeper-tls-") as where:
        cert_path, key_path = os.path.join(where, "cert.pem"), os.path.join(where, "key.pem")
        for path, text in ((cert_path, certificate), (key_path, key)):
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w", encoding="utf-8") as out:
                out.write(text)
        context.load_cert_chain(cert_path, key_path, password)
