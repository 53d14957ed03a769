"""The test-only fault hook (storage_core/faults.py): parsing, the n-th pass, kill and raise."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest

from storage_core import faults
from storage_core.faults import ENV, FaultSpec, InjectedFault, fault_point, parse


def test_parse_defaults_and_lists() -> None:
    assert parse("copy.log.stored") == [FaultSpec("copy.log.stored", 1, "kill")]
    assert parse("copy.log.stored:3:raise, cleanup.delete.started:2") == [
        FaultSpec("copy.log.stored", 3, "raise"),
        FaultSpec("cleanup.delete.started", 2, "kill"),
    ]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("copy.nowhere", "unknown fault point"),
        ("copy.log.stored:x", "must be an integer"),
        ("copy.log.stored:0", ">= 1"),
        ("copy.log.stored:1:explode", "action must be one of"),
    ],
)
def test_parse_refuses_typos(value: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse(value)


def test_unset_variable_passes_every_point(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    for point in faults.POINTS:
        fault_point(point)  # no effect: reaching the next line is the assertion
    assert fault_point("copy.log.stored") is None


def test_raise_on_the_nth_pass_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(faults, "_COUNTERS", faults._Counters())
    monkeypatch.setenv(ENV, "cleanup.segment.deleted:2:raise")
    fault_point("cleanup.segment.deleted")
    fault_point("copy.log.stored")  # other points do not count
    with pytest.raises(InjectedFault, match=r"cleanup.segment.deleted \(pass 2\)"):
        fault_point("cleanup.segment.deleted")
    fault_point("cleanup.segment.deleted")  # the third pass goes through


def test_an_unlisted_point_in_code_is_a_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "copy.log.stored")
    with pytest.raises(ValueError, match="not listed"):
        fault_point("copy.not.a.point")


def test_kill_is_a_sigkill_of_the_process_itself() -> None:
    code = (
        "from storage_core.faults import fault_point\n"
        "fault_point('copy.segment.started')\n"
        "print('first pass survived', flush=True)\n"
        "fault_point('copy.segment.started')\n"
        "print('second pass survived', flush=True)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, ENV: "copy.segment.started:2"},
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL
    assert proc.stdout.splitlines() == ["first pass survived"]


def test_kill_ends_the_process_when_it_is_pid_1() -> None:
    """In a container the command is PID 1 of its PID namespace, where the kernel drops the SIGKILL it
    sends itself: the hook must end it anyway (the container-mode tests kill Jobs this way)."""
    unshare = shutil.which("unshare")
    assert unshare, "this test needs util-linux's unshare to run Python as PID 1 of a new PID namespace"
    code = (
        "import os\n"
        "from storage_core.faults import fault_point\n"
        "assert os.getpid() == 1, os.getpid()\n"
        "print('first pass survived', flush=True)\n"
        "fault_point('copy.segment.started')\n"
        "print('after the kill', flush=True)\n"
    )
    proc = subprocess.run(
        [unshare, "--pid", "--fork", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, ENV: "copy.segment.started"},
        timeout=60,
    )
    assert "Operation not permitted" not in proc.stderr, f"unshare --pid needs root here: {proc.stderr}"
    # unshare --fork exits with its child's status: 137 is the hook's _exit (a SIGKILL would show as -9).
    assert proc.returncode == 128 + signal.SIGKILL, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.splitlines() == ["first pass survived"]
