"""A rebuild whose downloads meet S3 faults (500, SlowDown, stalls, resets, short reads) restores exactly
what a fault-free one does: every request is retried under the store's policy, nothing damaged is
installed."""

from __future__ import annotations

import uuid
from pathlib import Path

import s3fs

from harness.moto_s3 import MotoServer
from harness.s3_faults import MIXED_FAULTS, FaultPlan, FaultProxy, proxied_options, report
from storage_core.adapters.store import RemoteStore
from storage_core.jobs.rebuild import RebuildOptions, rebuild_log_dir
from storage_core.retry import RetryPolicy

from .synthetic import BROKER, TOPIC, format_log_dir, tree, write_tier


def test_rebuild_from_s3_under_faults_restores_every_file(
    moto_server: MotoServer, s3_fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    # The synthetic tier, written to file:// and mirrored into a moto bucket object by object.
    tier = write_tier(tmp_path / "remote", big_segment=(9 << 20))
    options = moto_server.storage_options()
    bucket = f"rebuild-{uuid.uuid4().hex[:8]}"
    fs = s3fs.S3FileSystem(**options)
    fs.mkdir(bucket)
    root = Path(tier.store.root)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        fs.pipe_file(f"{bucket}/tier/{path.relative_to(root)}", path.read_bytes())

    s3_fault_proxy.set_plan(FaultPlan(rates=MIXED_FAULTS, seed=5, max_in_a_row=2, caps={"stall": 4}))
    store = RemoteStore(
        f"s3://{bucket}/tier", proxied_options(options, s3_fault_proxy), retry=RetryPolicy(max_delay=0.3)
    )
    log_dir = tmp_path / "data"
    format_log_dir(log_dir)
    outcome = rebuild_log_dir(log_dir, store, tier.cluster, RebuildOptions(broker_id=BROKER, parallelism=3))
    assert outcome.action == "rebuilt"
    assert s3_fault_proxy.total_injected() > 0, "the rebuild met no fault: the test tests nothing"
    for p in range(tier.partitions):
        files = tree(log_dir / f"{TOPIC}-{p}")
        restored = {
            name: data for name, data in files.items() if name.endswith((".log", ".index", ".timeindex"))
        }
        assert restored == tier.expected_files(p), f"partition {p}"
    report(
        "rebuild",
        s3_fault_proxy,
        files_verified=sum(len(tier.expected_files(p)) for p in range(tier.partitions)),
    )
