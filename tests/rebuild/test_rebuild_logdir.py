"""The rebuild's log-dir side on a real filesystem and a real file:// remote tier: what lands where, how
a failed run is detected and completed, and what it refuses. (The broker's side: the real-cluster tests.)"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storage_core.errors import CorruptDataError, RemoteObjectNotFound
from storage_core.formats.checkpoints import (
    read_leader_epoch_checkpoint,
    read_partition_metadata,
    topic_id_to_string,
)
from storage_core.jobs.rebuild import RebuildOptions, RebuildOutcome, rebuild_log_dir
from storage_core.rebuild.plan import RebuildRefused
from storage_core.rebuild.restore import CHUNK, TMP_SUFFIX, RestoreProgress
from storage_core.rebuild.state import (
    CLEAN_SHUTDOWN,
    MARKER,
    META,
    META_ASIDE,
    STAGING_DIR,
    Phase,
    RebuildDir,
    Situation,
    classify,
)
from storage_core.remote.layout import SegmentObject

from .synthetic import BROKER, TOPIC, TOPIC_ID, SyntheticTier, format_log_dir, tree, write_tier

OPTIONS = RebuildOptions(broker_id=BROKER, parallelism=3)


def rebuild(log_dir: Path, tier: SyntheticTier, options: RebuildOptions = OPTIONS) -> RebuildOutcome:
    return rebuild_log_dir(log_dir, tier.store, tier.cluster, options)


def partition_files(log_dir: Path, partition: int) -> dict[str, bytes]:
    return tree(log_dir / f"{TOPIC}-{partition}")


def test_fresh_rebuild_restores_exactly_the_plan(tmp_path: Path) -> None:
    tier = write_tier(tmp_path / "remote")
    log_dir = tmp_path / "data"
    meta = format_log_dir(log_dir)
    (log_dir / CLEAN_SHUTDOWN).write_text("{}")
    outcome = rebuild(log_dir, tier)
    assert outcome.action == "rebuilt"
    for p in range(tier.partitions):
        files = partition_files(log_dir, p)
        metadata = files.pop("partition.metadata")
        epochs = files.pop("leader-epoch-checkpoint")
        assert files == tier.expected_files(p)
        assert metadata == f"version: 0\ntopic_id: {TOPIC_ID}".encode()
        assert (
            topic_id_to_string(read_partition_metadata(log_dir / f"{TOPIC}-{p}" / "partition.metadata"))
            == TOPIC_ID
        )
        last = tier.segments[p][-1]
        assert [
            (e.epoch, e.start_offset)
            for e in read_leader_epoch_checkpoint(log_dir / f"{TOPIC}-{p}" / "leader-epoch-checkpoint")
        ] == [tuple(e) for e in last.leader_epochs]
        assert epochs.startswith(b"0\n2\n")
    assert (log_dir / META).read_bytes() == meta
    assert not (log_dir / META_ASIDE).exists() and not (log_dir / STAGING_DIR).exists()
    assert not (log_dir / CLEAN_SHUTDOWN).exists(), "a clean-shutdown marker would skip Kafka's recovery"
    assert outcome.restore.downloaded_bytes == sum(
        len(b) for p in range(tier.partitions) for b in tier.expected_files(p).values()
    )
    summary = {s.partition: s for s in outcome.partitions}
    assert summary[0].restored_end == tier.segments[0][-1].next_offset
    assert summary[0].expected_tail == tier.tail


def test_rerun_on_a_rebuilt_dir_changes_nothing(tmp_path: Path) -> None:
    tier = write_tier(tmp_path / "remote")
    log_dir = tmp_path / "data"
    format_log_dir(log_dir)
    rebuild(log_dir, tier)
    before = {f: (f.stat().st_mtime_ns, f.read_bytes()) for f in log_dir.rglob("*") if f.is_file()}
    outcome = rebuild(log_dir, tier)
    assert outcome.action == "already-rebuilt"
    assert {f: (f.stat().st_mtime_ns, f.read_bytes()) for f in log_dir.rglob("*") if f.is_file()} == before


def test_a_failed_restore_leaves_a_guarded_dir_that_the_next_run_completes(tmp_path: Path) -> None:
    tier = write_tier(tmp_path / "remote", segments=8)
    reference = tmp_path / "reference"
    format_log_dir(reference)
    rebuild(reference, tier)

    log_dir = tmp_path / "data"
    format_log_dir(log_dir)
    victim = tier.key(tier.segments[1][5], SegmentObject.LOG)
    Path(victim).rename(victim + ".away")
    with pytest.raises(RemoteObjectNotFound):
        rebuild(log_dir, tier, RebuildOptions(broker_id=BROKER, parallelism=1))
    rdir = RebuildDir(log_dir)
    assert classify(rdir.observe(), log_dir) is Situation.INTERRUPTED
    assert (
        (log_dir / STAGING_DIR).is_dir()
        and (log_dir / META_ASIDE).is_file()
        and not (log_dir / META).exists()
    )
    assert not any((log_dir / f"{TOPIC}-{p}").exists() for p in range(tier.partitions))
    staged = list((log_dir / STAGING_DIR).rglob("*.log"))
    assert staged, "downloads before the failure stay for the next run"

    Path(victim + ".away").rename(victim)
    outcome = rebuild(log_dir, tier)
    assert outcome.action == "resumed"
    assert outcome.restore.kept_files >= len(staged)
    assert _without_marker(tree(log_dir)) == _without_marker(tree(reference))
    marker = rdir.read_marker()
    assert marker is not None and marker.phase is Phase.COMPLETE


def _without_marker(files: dict[str, bytes]) -> dict[str, bytes]:
    """The marker holds timestamps; everything else must be byte-identical."""
    return {k: v for k, v in files.items() if k != MARKER}


def test_leftovers_and_damaged_files_in_staging_are_replaced(tmp_path: Path) -> None:
    tier = write_tier(tmp_path / "remote", partitions=1)
    log_dir = tmp_path / "data"
    format_log_dir(log_dir)
    rdir = RebuildDir(log_dir)
    rdir.arm_guards(BROKER)
    pdir = rdir.partition_dir(f"{TOPIC}-0")
    first = tier.segments[0][0]
    (pdir / f"{first.base_offset:020d}.log").write_bytes(b"short")
    (pdir / f"{first.base_offset:020d}.log{TMP_SUFFIX}").write_bytes(b"half a download")
    (pdir / "99999999999999999999.log").write_bytes(b"not in the plan")
    rdir.partition_dir("gone-7")
    outcome = rebuild(log_dir, tier)
    assert outcome.action == "resumed"
    files = partition_files(log_dir, 0)
    files.pop("partition.metadata"), files.pop("leader-epoch-checkpoint")
    assert files == tier.expected_files(0)
    assert not (log_dir / "gone-7").exists()


# Where the damage is -> what catches it: a record's bytes fail their batch's CRC; a batch's leader epoch
# (before the CRC's range) fails the batch chain; in older metadata, the whole-object CRC-32C.
@pytest.mark.parametrize(
    ("where", "legacy", "caught_by"),
    [
        (100, False, "record batch CRC mismatch"),
        (12, False, "batch chain CRC-32C"),
        (None, True, "CRC-32C 0x"),
    ],
)
def test_a_corrupted_remote_object_is_never_installed(
    tmp_path: Path, where: int | None, legacy: bool, caught_by: str
) -> None:
    tier = write_tier(tmp_path / "remote", partitions=1, legacy_log_crc=legacy)
    key = tier.key(tier.segments[0][2], SegmentObject.LOG)
    data = bytearray(Path(key).read_bytes())
    data[len(data) // 2 if where is None else where] ^= 0x40
    Path(key).write_bytes(bytes(data))
    log_dir = tmp_path / "data"
    format_log_dir(log_dir)
    with pytest.raises(CorruptDataError, match=caught_by) as err:
        rebuild(log_dir, tier)
    assert key in str(err.value)
    name = f"{tier.segments[0][2].base_offset:020d}.log"
    assert not list((log_dir / STAGING_DIR).rglob(name)), (
        "a file with its real name must be whole and verified"
    )
    assert not (log_dir / META).exists(), "Kafka must not be able to start on this dir"


def test_objects_larger_than_a_chunk_stream_intact(tmp_path: Path) -> None:
    tier = write_tier(tmp_path / "remote", partitions=1, segments=3, big_segment=2 * CHUNK + 12345)
    log_dir = tmp_path / "data"
    format_log_dir(log_dir)
    rebuild(log_dir, tier, RebuildOptions(broker_id=BROKER, parallelism=2))
    files = partition_files(log_dir, 0)
    assert (
        files[f"{tier.segments[0][-1].base_offset:020d}.log"]
        == tier.blobs[tier.key(tier.segments[0][-1], SegmentObject.LOG)]
    )


def test_a_crash_after_the_restore_is_finished_by_installing(tmp_path: Path) -> None:
    tier = write_tier(tmp_path / "remote", partitions=2)
    log_dir = tmp_path / "data"
    meta = format_log_dir(log_dir)
    hidden = tier.key(tier.segments[1][0], SegmentObject.LOG)
    Path(hidden).rename(hidden + ".away")
    with pytest.raises(RemoteObjectNotFound):
        rebuild(log_dir, tier, RebuildOptions(broker_id=BROKER, parallelism=1))
    Path(hidden + ".away").rename(hidden)
    # Walk the remaining steps by hand up to the install, as a crash right after mark_installing leaves it.
    from storage_core.jobs.rebuild import make_plan, summarize
    from storage_core.rebuild.restore import restore

    rdir = RebuildDir(log_dir)
    plan = make_plan(tier.store, tier.cluster, OPTIONS)
    restore(plan.restoring, rdir.partition_dir, tier.store, parallelism=2)
    rdir.mark_installing([summarize(p) for p in plan.partitions])
    os.rename(log_dir / STAGING_DIR / f"{TOPIC}-0", log_dir / f"{TOPIC}-0")  # one partition moved already
    assert classify(rdir.observe(), log_dir) is Situation.INSTALLING
    outcome = rebuild(log_dir, tier)
    assert outcome.action == "installed"
    assert (log_dir / META).read_bytes() == meta
    for p in range(2):
        files = partition_files(log_dir, p)
        files.pop("partition.metadata"), files.pop("leader-epoch-checkpoint")
        assert files == tier.expected_files(p)


def test_dry_run_changes_nothing(tmp_path: Path) -> None:
    tier = write_tier(tmp_path / "remote")
    log_dir = tmp_path / "data"
    format_log_dir(log_dir)
    before = tree(log_dir)
    outcome = rebuild(log_dir, tier, RebuildOptions(broker_id=BROKER, dry_run=True))
    assert outcome.action == "dry-run" and outcome.planned_bytes > 0
    assert tree(log_dir) == before and sorted(os.listdir(log_dir)) == [META]


def test_refusals(tmp_path: Path) -> None:
    tier = write_tier(tmp_path / "remote", partitions=1)
    not_empty = tmp_path / "not-empty"
    format_log_dir(not_empty)
    (not_empty / "orders-0").mkdir()
    with pytest.raises(RebuildRefused, match="not empty"):
        rebuild(not_empty, tier)
    assert sorted(os.listdir(not_empty)) == [META, "orders-0"]

    other_node = tmp_path / "other-node"
    format_log_dir(other_node, node_id=2)
    with pytest.raises(RebuildRefused, match="node.id 2"):
        rebuild(other_node, tier)

    both = tmp_path / "both"
    format_log_dir(both)
    (both / META_ASIDE).write_text("node.id=3\n")
    with pytest.raises(RebuildRefused, match="both"):
        rebuild(both, tier)

    unformatted = tmp_path / "unformatted"
    unformatted.mkdir()
    with pytest.raises(RebuildRefused, match="format"):
        rebuild(unformatted, tier)


def test_a_held_lock_means_a_running_broker(tmp_path: Path) -> None:
    tier = write_tier(tmp_path / "remote", partitions=1)
    log_dir = tmp_path / "data"
    format_log_dir(log_dir)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, signal\n"
            f"fd = os.open({str(log_dir / '.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
            # Hold the lock until killed (a fixed sleep could end before a slow test is done).
            "fcntl.lockf(fd, fcntl.LOCK_EX)\nprint('locked', flush=True)\nsignal.pause()\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(RebuildRefused, match="locked"):
            rebuild(log_dir, tier)
        assert sorted(os.listdir(log_dir)) == [".lock", META]
    finally:
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + 10
    fd = os.open(log_dir / ".lock", os.O_RDWR)
    try:
        while True:  # the lock goes with the process
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
    finally:
        os.close(fd)
    assert rebuild(log_dir, tier).action == "rebuilt"


def test_a_rate_limited_rebuild_waits_for_its_rate_and_restores_the_same(tmp_path: Path) -> None:
    import threading

    from storage_core.throttle import RateLimiter, limited

    tier = write_tier(tmp_path / "remote")
    log_dir = tmp_path / "data"
    format_log_dir(log_dir)
    lock = threading.Lock()
    slept: list[float] = []

    def sleep(seconds: float) -> None:  # the clock stands still, so the debt of every download adds up
        with lock:
            slept.append(seconds)

    total = sum(len(b) for p in range(tier.partitions) for b in tier.expected_files(p).values())
    rate = total // 4
    seen: list[int] = []
    outcome = rebuild_log_dir(
        log_dir,
        tier.store,
        tier.cluster,
        OPTIONS,
        RestoreProgress(advanced=limited(seen.append, RateLimiter(rate, clock=lambda: 0.0, sleep=sleep))),
    )
    assert outcome.action == "rebuilt" and outcome.restore.downloaded_bytes == total == sum(seen)
    assert max(slept) == pytest.approx((total - rate) / rate)
    for p in range(tier.partitions):
        files = partition_files(log_dir, p)
        assert {k: v for k, v in files.items() if k in tier.expected_files(p)} == tier.expected_files(p)


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--max-bytes-per-second", "-1", "--max-bytes-per-second must be > 0"),
        ("--parallelism", "0", "--parallelism must be >= 1, got 0"),
    ],
)
def test_rebuild_refuses_a_non_positive_rate_or_parallelism(
    tmp_path: Path, flag: str, value: str, message: str
) -> None:
    from harness.tierkeeper_cli import run_cli

    log_dir = tmp_path / "data"
    format_log_dir(log_dir)
    proc = run_cli(
        "rebuild",
        "--log-dir",
        str(log_dir),
        "--bootstrap-servers",
        "127.0.0.1:9",
        "--broker-id",
        "3",
        "--remote",
        f"file://{tmp_path / 'remote'}",
        flag,
        value,
    )
    assert proc.returncode != 0 and message in proc.stderr
    assert "Traceback" not in proc.stderr
