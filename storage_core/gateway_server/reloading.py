"""What the gateway reads from files that are replaced while it runs: its own certificate (cert-manager
renews it), and the Kafka client properties it reaches the brokers with (a CA Strimzi renews, a rotated
client certificate or SASL password). Kubernetes replaces a mounted Secret's files in place (one atomic
swap of the volume's ``..data`` link), so a gateway that read them once would serve an expired
certificate, or stop trusting the brokers, weeks after its start.

Each such thing is a :class:`Reloading`: built at start (a failure there stops the start, with the reason),
then built again whenever :meth:`Reloading.refresh` sees one of its files changed (their identity, size or
modification time; a directory's own entry too, so a property file added or removed counts). A build that
fails then keeps the previous value and says why (a Secret half-written by hand, a new key not matching
its certificate yet): the gateway never drops to serving nothing. Connections already open keep what they
were opened with; new ones get the new value.
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from storage_core.errors import ConfigError, TierkeeperError

log = logging.getLogger("tierkeeper.gateway")

T = TypeVar("T")
Stamp = tuple[tuple[str, tuple[int, int, int, int] | None], ...]


def stamp(paths: Iterable[str]) -> Stamp:
    """What identifies the files' current contents without reading them (None: absent)."""
    out: list[tuple[str, tuple[int, int, int, int] | None]] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append((path, None))
            continue
        out.append((path, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)))
    return tuple(out)


@dataclass(frozen=True)
class Loaded(Generic[T]):
    value: T
    files: Sequence[str]
    """The files (and directories) ``value`` was read from: a change to any builds it again."""


Outcome = Callable[[str, bool], None]
"""Told of every rebuild: what was rebuilt, and whether it succeeded (metrics)."""


class Reloading(Generic[T]):
    def __init__(self, what: str, load: Callable[[], Loaded[T]], *, outcome: Outcome | None = None) -> None:
        self.what = what
        self._load = load
        self._outcome = outcome
        loaded = load()
        self._value = loaded.value
        self._files = list(loaded.files)
        self._seen = stamp(self._files)

    @property
    def current(self) -> T:
        return self._value

    def refresh(self) -> bool:
        """Build again if a file changed since the last look; True when a new value is in place."""
        now = stamp(self._files)
        if now == self._seen:
            return False
        # Stamped before the build: a file replaced during it is seen changed at the next look.
        self._seen = now
        try:
            loaded = self._load()
        except (TierkeeperError, OSError, ssl.SSLError, ValueError) as exc:
            log.error("%s changed but cannot be loaded, so the previous one stays in use: %s", self.what, exc)
            self._report(False)
            return False
        self._value = loaded.value
        if list(loaded.files) != self._files:
            self._files = list(loaded.files)
            self._seen = stamp(self._files)
        log.info("%s changed: loaded again (new connections use it)", self.what)
        self._report(True)
        return True

    def _report(self, ok: bool) -> None:
        if self._outcome is not None:
            self._outcome(self.what, ok)


def serving_context(certificate: Reloading[ssl.SSLContext]) -> ssl.SSLContext:
    """The context a TLS listener is created with: every handshake switches to ``certificate``'s current
    context (OpenSSL's server-name callback runs on each ClientHello, with or without SNI), so a reloaded
    certificate needs no new listener."""
    base = certificate.current

    def choose(connection: ssl.SSLObject | ssl.SSLSocket, _name: str | None, _base: ssl.SSLContext) -> None:
        connection.context = certificate.current

    base.sni_callback = choose
    return base


def server_certificate(cert: str, key: str) -> Loaded[ssl.SSLContext]:
    """The gateway's own certificate chain and key (``--tls-cert``/``--tls-key``) as a server context."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"--tls-cert {cert} / --tls-key {key}: {exc.strerror or exc}") from None
    return Loaded(context, [cert, key])
