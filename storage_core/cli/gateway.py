"""``tierkeeper gateway``: a Kafka protocol proxy in front of the cluster that serves fetches below the
brokers' log start from the remote tier, so every unchanged Kafka client reads the tiered history.

Port rule: the bootstrap listener is ``--listen HOST:PORT``; the broker with node id N is served at
``--broker-port-base`` + N (default: the bootstrap port + 1). Both are printed at start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import os
import signal
import socket
import ssl
import sys
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from storage_core.adapters.kafka_tls import client_tls as kafka_tls
from storage_core.adapters.kafka_tls import tls_files
from storage_core.adapters.malloc_tuning import keep_freed_buffers
from storage_core.api.cluster_parts import DEFAULT_GATEWAY_CACHE_BYTES
from storage_core.cli.common import (
    add_bytes_arg,
    add_remote_args,
    open_store,
    require_above_zero,
    require_positive,
)
from storage_core.cli.kafka_client import add_kafka_client_args, kafka_client_config, kafka_client_files
from storage_core.cli.subcommand import Subcommand
from storage_core.errors import ConfigError
from storage_core.gateway.addresses import Address
from storage_core.gateway.group_sightings import GATEWAY_ID_ENV, SIGHTINGS_TOPIC
from storage_core.gateway.host_port import parse_address, parse_addresses
from storage_core.gateway_server.reloading import Loaded, Reloading, server_certificate, serving_context

if TYPE_CHECKING:
    from storage_core.adapters.kafka_admin import KafkaAdmin
    from storage_core.adapters.kafka_group_sightings import SightingsWriter

DEFAULT_LISTEN = "127.0.0.1:9192"
GATEWAY_RETRY_ATTEMPTS = 3
GATEWAY_RETRY_MAX_DELAY = 2.0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap-servers", required=True, help="the Kafka cluster behind the gateway")
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"bootstrap listener (default {DEFAULT_LISTEN})",
    )
    p.add_argument(
        "--broker-port-base",
        type=int,
        metavar="PORT",
        help="broker N listens at PORT+N (default: bootstrap port + 1)",
    )
    p.add_argument(
        "--advertised-host",
        help="the host clients are told to connect to (default: the --listen host, or this machine's name "
        "when listening on all addresses); in Kubernetes the gateway Service's name",
    )
    p.add_argument(
        "--metrics-listen", metavar="HOST:PORT", help="HTTP /metrics, /healthz and /readyz (default: off)"
    )
    p.add_argument(
        "--tls-cert", metavar="PEM", help="TLS from clients to the gateway: the gateway's certificate chain"
    )
    p.add_argument("--tls-key", metavar="PEM", help="the key of --tls-cert")
    add_bytes_arg(
        p,
        "--cache-bytes",
        DEFAULT_GATEWAY_CACHE_BYTES,
        "read-ahead cache of remote blocks (default {default}; a file:// tier uses the page cache)",
    )
    add_bytes_arg(p, "--block-bytes", 1 << 20, "remote read size (default {default})")
    p.add_argument(
        "--readahead-blocks",
        type=int,
        default=8,
        metavar="N",
        help="blocks fetched ahead of a reader (default 8; file:// tier: how far the kernel reads ahead)",
    )
    p.add_argument(
        "--tier-threads", type=int, default=8, metavar="N", help="threads reading the remote tier (default 8)"
    )
    add_bytes_arg(
        p,
        "--max-frame-bytes",
        100 << 20,
        "largest request frame (default {default}, Kafka's socket.request.max.bytes)",
    )
    p.add_argument(
        "--tier-grant-seconds",
        type=float,
        default=1.0,
        metavar="S",
        help="after the broker answers a client's fetch OFFSET_OUT_OF_RANGE (its authorization of a tier "
        "read), that connection's fetches of the partition below the broker's log start are answered from "
        "the tier without asking the broker for S seconds (default 1; 0: ask on every fetch). A revoked "
        "READ stops tier answers within S of reaching the broker",
    )
    p.add_argument(
        "--shutdown-grace-seconds",
        type=float,
        default=30.0,
        metavar="S",
        help="time in-flight requests get to finish on SIGTERM (default 30)",
    )
    p.add_argument(
        "--discovery-interval-seconds",
        type=float,
        default=30.0,
        metavar="S",
        help="how often the gateway lists the cluster's brokers itself (default 30); a broker missing from "
        "3 listings in a row loses its listener",
    )
    p.add_argument(
        "--reload-interval-seconds",
        type=float,
        default=30.0,
        metavar="S",
        help="how often the gateway looks whether --tls-cert/--tls-key, the --kafka-config-dir files or the "
        "TLS files its Kafka properties name were replaced, and loads them again (default 30; SIGHUP: now)",
    )
    p.add_argument(
        "--gateway-id",
        metavar="ID",
        help="this gateway replica's name in the consumer groups it reports (default $"
        f"{GATEWAY_ID_ENV}, else HOSTNAME:PORT; in Kubernetes the pod's name)",
    )
    p.add_argument(
        "--group-sightings",
        action=argparse.BooleanOptionalAction,
        default=True,
        help=f"write the consumer groups and members this gateway carries to the compacted topic "
        f"{SIGHTINGS_TOPIC} (created if missing), so the trim is not held for them (default: on)",
    )
    p.add_argument("--log-format", choices=["text", "json"], default="text", help="json: one object per line")
    add_kafka_client_args(p)
    add_remote_args(p)
    p.set_defaults(retry_attempts=GATEWAY_RETRY_ATTEMPTS, retry_max_delay=GATEWAY_RETRY_MAX_DELAY)


def _tier_ranges(args: argparse.Namespace, store: Any) -> tuple[Any, ThreadPoolExecutor | None]:
    """Where tier answers read their bytes (storage_core/gateway/ranges.py), and the threads that fetch
    for it: a file:// tier's files straight (the page cache is the cache, the kernel reads ahead), any
    other store through the block cache."""
    if store.is_local:
        from storage_core.adapters.local_ranges import LocalRanges

        return LocalRanges(read_ahead_bytes=args.readahead_blocks * args.block_bytes), None
    from storage_core.gateway.block_cache import BlockCache

    fetch_pool = ThreadPoolExecutor(
        max_workers=max(args.readahead_blocks, 1) * 2, thread_name_prefix="tierkeeper-gateway-fetch"
    )
    blocks = BlockCache(
        store.get_range,
        fetch_pool,
        block_bytes=args.block_bytes,
        max_bytes=args.cache_bytes,
        readahead=args.readahead_blocks,
    )
    return blocks, fetch_pool


def _listen_address(value: str, flag: str) -> Address:
    """A listen flag's ``HOST:PORT``; no host: every address."""
    address = parse_address(value, flag)
    return Address(address.host or "0.0.0.0", address.port)


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


@contextlib.contextmanager
def _kio_without_hypothesis() -> Iterator[None]:
    """Import kio as a server needs it. kio registers Hypothesis strategies for its types whenever
    ``hypothesis`` is importable (it is in the test environment, not in the images): that import and the
    strategies' Unicode tables cost 1.5-5 s of CPU at every gateway start (20 s under a profiler on a
    busy machine) and write a ``.hypothesis`` directory into the working directory. Hidden while kio loads;
    afterwards ``import hypothesis`` works again in this process."""
    hide = "hypothesis" not in sys.modules and "kio" not in sys.modules
    if hide:
        sys.modules["hypothesis"] = None  # type: ignore[assignment]  # makes `import hypothesis` fail
    try:
        yield
    finally:
        if hide and sys.modules.get("hypothesis", False) is None:
            del sys.modules["hypothesis"]


def _return_large_buffers_to_the_os() -> None:
    """glibc malloc settings for a process that allocates and frees megabyte buffers from many threads
    (record sets read from the tier, fetch responses): every allocation from 256 KiB up gets pages of its
    own (mmap) that go back to the OS when freed, and at most two malloc arenas. glibc's default raises
    the mmap threshold to the size of each such buffer freed, after which they come from per-thread
    arenas that keep the memory: with 16 consumers reading history the gateway's peak RSS was 290 MB
    with the defaults and 201 MB with these (bench/gateway_bench.py, the same phase). No effect on other
    C libraries."""
    import ctypes

    m_mmap_threshold, m_arena_max = -3, -8
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(m_mmap_threshold, 256 << 10)
        libc.mallopt(m_arena_max, 2)
    except (OSError, AttributeError):  # not glibc
        pass


@dataclass(frozen=True)
class _BrokersClient:
    """How the gateway reaches the brokers: TLS for the clients' connections, an admin client for its own
    broker discovery, the writer of its group sightings, all from the same Kafka client properties."""

    tls: ssl.SSLContext | None
    admin: KafkaAdmin
    sightings: SightingsWriter | None


def _kafka_client(args: argparse.Namespace) -> Loaded[_BrokersClient]:
    from storage_core.adapters.kafka_admin import KafkaAdmin

    config = kafka_client_config(args)
    tls = kafka_tls(config)  # first: its refusals say which properties to use instead
    admin = KafkaAdmin(args.bootstrap_servers, config)
    sightings = None
    if args.group_sightings:
        from storage_core.adapters.kafka_group_sightings import SightingsWriter

        sightings = SightingsWriter(admin, config)
    return Loaded(
        _BrokersClient(tls, admin, sightings),
        [*kafka_client_files(args), *tls_files(config)],
    )


def gateway_id(args: argparse.Namespace, port: int, environ: Mapping[str, str] | None = None) -> str:
    """``--gateway-id``, else ``$TIERKEEPER_GATEWAY_ID`` (the operator's pods: their name), else
    ``HOSTNAME:PORT`` (two gateways on one machine listen on different ports)."""
    env = os.environ if environ is None else environ
    return args.gateway_id or env.get(GATEWAY_ID_ENV) or f"{socket.gethostname()}:{port}"


def _sightings(client: _BrokersClient) -> SightingsWriter:
    assert client.sightings is not None  # made whenever --group-sightings is on
    return client.sightings


def run(args: argparse.Namespace) -> int:
    require_positive(args, "cache_bytes", "block_bytes", "tier_threads", "max_frame_bytes")
    if args.readahead_blocks < 0:
        raise ConfigError(f"--readahead-blocks must be >= 0, got {args.readahead_blocks}")
    _return_large_buffers_to_the_os()
    with _kio_without_hypothesis():
        from storage_core.gateway_server.context import GatewayContext, Limits
        from storage_core.gateway_server.group_publisher import GroupPublisher
        from storage_core.gateway_server.metrics import GatewayMetrics
        from storage_core.gateway_server.server import Gateway, Hooks, Listen

    from storage_core.gateway.addresses import PortRule
    from storage_core.gateway.group_members import GroupMembers
    from storage_core.gateway.history import TierHistory

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        _JsonFormatter()
        if args.log_format == "json"
        else logging.Formatter("%(asctime)s %(levelname)s %(message)s")
    )
    logging.getLogger("tierkeeper").addHandler(handler)
    logging.getLogger("tierkeeper").setLevel(logging.INFO)

    listen_at = _listen_address(args.listen, "--listen")
    host, port = listen_at.host, listen_at.port
    advertised = args.advertised_host or (socket.getfqdn() if host in ("0.0.0.0", "::") else host)
    if port == 0 and args.broker_port_base is None:
        raise ConfigError("--listen with port 0 needs --broker-port-base")
    rule = PortRule(
        advertised, port, args.broker_port_base if args.broker_port_base is not None else port + 1
    )
    bootstrap = parse_addresses(args.bootstrap_servers, "--bootstrap-servers")
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ConfigError("--tls-cert and --tls-key go together")
    require_above_zero(args, "reload_interval_seconds")
    metrics = GatewayMetrics()
    certificate = (
        Reloading(
            "the gateway's certificate (--tls-cert, --tls-key)",
            functools.partial(server_certificate, args.tls_cert, args.tls_key),
            outcome=metrics.reloaded,
        )
        if args.tls_cert
        else None
    )
    brokers_client = Reloading(
        "the Kafka client properties", functools.partial(_kafka_client, args), outcome=metrics.reloaded
    )
    store = open_store(args, existing=True)
    keep_freed_buffers()  # answer buffers reused, not fresh pages per fetch (adapters/malloc_tuning.py)
    tier_pool = ThreadPoolExecutor(
        max_workers=args.tier_threads, thread_name_prefix="tierkeeper-gateway-tier"
    )
    ranges, fetch_pool = _tier_ranges(args, store)
    ranges.observe(metrics.cache_lookup)
    ctx = GatewayContext(
        rule=rule,
        bootstrap=bootstrap,
        history=TierHistory(store, ranges),
        tier_pool=tier_pool,
        metrics=metrics,
        limits=Limits(max_frame_bytes=args.max_frame_bytes, grant_s=args.tier_grant_seconds),
        upstream_tls=brokers_client.current.tls,
    )

    def discover() -> dict[int, Address]:
        admin = brokers_client.current.admin
        return {n: Address(h, p) for n, (h, p) in admin.broker_addresses().items()}

    def reload() -> None:
        if certificate is not None:
            certificate.refresh()
        if brokers_client.refresh():
            ctx.upstream_tls = brokers_client.current.tls

    def bucket_probe() -> str | None:
        try:
            store.require_root()
        except Exception as exc:  # noqa: BLE001 - readiness reports any failure as text
            return str(exc)
        return None

    metrics_at = _listen_address(args.metrics_listen, "--metrics-listen") if args.metrics_listen else None
    require_above_zero(args, "discovery_interval_seconds")
    listen = Listen(
        host,
        port,
        serving_context(certificate) if certificate is not None else None,
        metrics_at,
        discovery_interval_s=args.discovery_interval_seconds,
        shutdown_grace_s=args.shutdown_grace_seconds,
        reload_interval_s=args.reload_interval_seconds,
    )
    tasks = []
    if args.group_sightings:
        ctx.groups = GroupMembers()
        publisher = GroupPublisher(
            ctx.groups, gateway_id(args, port), lambda: _sightings(brokers_client.current), metrics
        )
        tasks.append(publisher.run)
    gateway = Gateway(ctx, listen, Hooks(discover=discover, bucket_probe=bucket_probe, reload=reload), tasks)

    async def main() -> None:
        await gateway.start()
        brokers = ", ".join(f"{n} -> {advertised}:{rule.broker_port(n)}" for n in sorted(ctx.brokers))
        print(
            f"tierkeeper gateway: bootstrap {advertised}:{gateway.bound_port(None)}; broker N at "
            f"{advertised}:{rule.broker_port_base}+N ({brokers or 'none known yet'})"
            + (f"; metrics http://{metrics_at.host}:{gateway.http_port}/metrics" if metrics_at else ""),
            flush=True,
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: loop.create_task(gateway.stop()))
        loop.add_signal_handler(signal.SIGHUP, lambda: loop.create_task(gateway.reload_now()))
        await gateway.wait_stopped()

    try:
        asyncio.run(main())
    finally:
        tier_pool.shutdown(wait=False, cancel_futures=True)
        if fetch_pool is not None:
            fetch_pool.shutdown(wait=False, cancel_futures=True)
    print("tierkeeper gateway: stopped", flush=True)
    return 0


COMMAND = Subcommand(
    "gateway",
    help="a Kafka protocol gateway: every Kafka client reads the tiered history through it",
    description=__doc__,
    add_args=add_args,
    run=run,
    formatter_class=argparse.RawDescriptionHelpFormatter,
)
