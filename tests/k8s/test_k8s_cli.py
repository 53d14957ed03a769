"""``python -m harness.cli k8s`` starts a control plane by hand, prints its kubeconfig, stops on Ctrl-C."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import yaml
from k8s_helpers import DEADLINE

from harness.paths import REPO_ROOT
from harness.tools import run_tool


def test_cli_starts_a_usable_control_plane_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "k8s", "--workdir", str(tmp_path / "plane")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "tests")},
    )
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout or []], daemon=True)
    reader.start()
    try:
        seen: list[str] = []
        while not any(line.startswith("kubeconfig: ") for line in seen):
            seen.append(lines.get(timeout=DEADLINE))
        kubeconfig = next(line for line in seen if line.startswith("kubeconfig: ")).split(": ", 1)[1].strip()
        nodes = run_tool("kubectl", ["--kubeconfig", kubeconfig, "get", "nodes", "-o", "yaml"]).stdout
        (node,) = yaml.safe_load(nodes)["items"]
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
        assert ready == "True"
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=DEADLINE)
    assert code == 0, "".join(seen)
