"""The compiled CRC-32C (crc_kernel.py) against the ``crc32c`` package, with the CRC instruction and with
the table-driven step that replaces it where the target lacks it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_core.formats import crc_kernel
from storage_core.formats.crc import crc32c

REPO = Path(__file__).resolve().parents[2]

# Lengths around each switch of the loop: words, three short blocks, three long blocks.
EDGES = sorted(
    {
        n + d
        for n in (0, 8, 3 * crc_kernel.SHORT, 3 * crc_kernel.LONG, 2 * 3 * crc_kernel.LONG)
        for d in range(-9, 10)
        if n + d >= 0
    }
)

CHECK_BOTH_PATHS = """
import os, sys
import numpy as np
from storage_core.formats import crc_kernel
from storage_core.formats.crc import crc32c
data = np.frombuffer(os.urandom(60_000), np.uint8)
lengths = [int(n) for n in sys.argv[1:]]
bad = [
    (s, n)
    for n in lengths
    for s in (0, 3)
    if crc_kernel.crc32c(data, s, s + n) != crc32c(data[s : s + n].tobytes())
]
print(crc_kernel.HARDWARE, bad)
"""


def test_catalogue_check_value() -> None:
    assert crc_kernel.crc32c(np.frombuffer(b"123456789", np.uint8)) == 0xE3069283


@pytest.mark.parametrize("start", [0, 1, 5])
def test_every_loop_switch_agrees_with_the_package(start: int) -> None:
    data = np.frombuffer(os.urandom(2 * 3 * crc_kernel.LONG + 64), np.uint8)
    for n in EDGES:
        want = crc32c(data[start : start + n].tobytes())
        assert crc_kernel.crc32c(data, start, start + n) == want, n


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=60_000), st.data())
def test_any_range_agrees_with_the_package(raw: bytes, data: st.DataObject) -> None:
    start = data.draw(st.integers(0, len(raw)))
    end = data.draw(st.integers(start, len(raw)))
    assert crc_kernel.crc32c(np.frombuffer(raw, np.uint8), start, end) == crc32c(raw[start:end])


def test_a_range_outside_the_data_is_refused() -> None:
    with pytest.raises(ValueError, match="outside"):
        crc_kernel.crc32c(np.zeros(10, np.uint8), 4, 11)


@pytest.mark.parametrize("cpu", ["host", "generic"])
def test_both_compiled_paths_agree_with_the_package(cpu: str) -> None:
    """``generic``: numba told to compile for a CPU without SSE 4.2, so the table-driven step is used."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "NUMBA_CPU_NAME": cpu}
    if cpu == "host":
        env.pop("NUMBA_CPU_NAME")
    lengths = [str(n) for n in EDGES[::3]] + ["59000"]
    out = subprocess.run(
        [sys.executable, "-c", CHECK_BOTH_PATHS, *lengths],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    hardware, bad = out.stdout.split(" ", 1)
    assert hardware == str(cpu == "host" and crc_kernel.HARDWARE)
    assert bad.strip() == "[]"
