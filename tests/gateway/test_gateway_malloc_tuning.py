"""adapters/malloc_tuning.py: with the gateway's malloc thresholds, a freed answer-sized buffer is reused by
the next one instead of coming back as fresh pages (page faults on every fetch), and its bytes are what was
written into it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

# An answer's life in the gateway: a buffer of a partition's fetch limit (+ a batch header), filled, kept
# while the next one is read ahead, freed. Prints minor page faults per buffer after a warm-up round.
CHILD = textwrap.dedent(
    """
    import json, resource, sys
    tuned = None
    if sys.argv[1] == "tuned":
        from storage_core.adapters.malloc_tuning import keep_freed_buffers
        tuned = keep_freed_buffers()
    size = (1 << 20) + 61
    alive, wrong = [], 0
    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for round_ in range(2):
        before = faults()
        for i in range(100):
            fill = bytes([i]) * size
            buffer = bytearray(size)
            buffer[:] = fill
            alive = [*alive[-1:], (buffer, fill)]
            wrong += sum(b != f for b, f in alive)
            del buffer
        per_buffer = (faults() - before) / 100
    print(json.dumps({"tuned": tuned, "faults": per_buffer, "wrong": wrong}))
    """
)


def _run(mode: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode], capture_output=True, text=True, timeout=120, check=True
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def test_freed_answer_buffers_are_reused_not_fresh_pages() -> None:
    tuned = _run("tuned")
    assert tuned["tuned"] is True, "glibc's mallopt refused the thresholds"
    assert tuned["wrong"] == 0
    # The fill loop itself copies a fresh `bytes` per buffer too; reused memory faults on neither.
    assert isinstance(tuned["faults"], float) and tuned["faults"] < 8, tuned
    # The same loop with glibc's defaults: every buffer (and fill) is new pages, so the check above can fail.
    plain = _run("plain")
    assert plain["wrong"] == 0
    assert isinstance(plain["faults"], float) and plain["faults"] > 100, plain
