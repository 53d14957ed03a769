"""Install the wheel the way the Dockerfile does (docker/install-venv.sh, constraints.txt, clean venvs) and
run both entry points in each target's environment.

No Docker engine runs here, so this is the closest check of the images: same script, same pins, same
wheel build; only where pip fetches files differs (the image build is offline from prebuilt wheels,
this test reads PyPI through pip's warm cache).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from harness.paths import REPO_ROOT

pytestmark = pytest.mark.slow

INSTALL_SCRIPT = REPO_ROOT / "docker" / "install-venv.sh"
CONSTRAINTS = REPO_ROOT / "constraints.txt"


@dataclass(frozen=True)
class Installed:
    target: str
    venv: Path

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        # A clean environment: nothing from the test venv or the repository may leak onto sys.path.
        env = {"PATH": f"{self.venv / 'bin'}:/usr/bin:/bin", "HOME": str(self.venv)}
        return subprocess.run(
            argv, capture_output=True, text=True, env=env, cwd=self.venv, timeout=300, check=False
        )


def _build_wheel(out: Path) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "--wheel-dir",
            str(out),
            str(REPO_ROOT),
        ],
        check=True,
        timeout=600,
    )
    (wheel,) = out.glob("tierkeeper-*.whl")
    return wheel


def _install(target: str, root: Path, wheel: Path) -> Installed:
    venv = root / target
    proc = subprocess.run(
        ["sh", str(INSTALL_SCRIPT), target, str(venv), str(wheel), str(CONSTRAINTS)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable},
        timeout=1200,
        check=False,
    )
    assert proc.returncode == 0, f"install-venv.sh {target} failed:\n{proc.stdout}\n{proc.stderr}"
    return Installed(target, venv)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Installed]:
    root = tmp_path_factory.mktemp("images")
    wheel = _build_wheel(root / "dist")
    # Two independent installs; pip spends most of its time unpacking, so they overlap well.
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {t: pool.submit(_install, t, root, wheel) for t in ("operator", "pipeline")}
        return {t: f.result() for t, f in futures.items()}


@pytest.mark.parametrize("target", ["operator", "pipeline"])
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("tierkeeper", "--help"), "copy"),
        (("tierkeeper", "operator", "--help"), "--all-namespaces"),
        (("python", "-m", "tierkeeper_operator", "--help"), "--all-namespaces"),
        (("tierkeeper", "copy", "--help"), "--log-dir"),
    ],
)
def test_entry_points_run(
    installed: dict[str, Installed], target: str, argv: tuple[str, ...], expected: str
) -> None:
    proc = installed[target].run(*argv)
    assert proc.returncode == 0, proc.stderr
    assert expected in proc.stdout
    assert "unavailable" not in proc.stderr  # a plugin verb that failed to load is only a warning


def installed_versions(env: Installed) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json; "
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    )
    proc = env.run("python", "-c", code)
    assert proc.returncode == 0, proc.stderr
    return {canonicalize_name(k): v for k, v in json.loads(proc.stdout).items()}


def constraint_pins() -> dict[str, str]:
    out = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[canonicalize_name(name)] = version
    return out


def test_pipeline_holds_exactly_the_pinned_distributions(installed: dict[str, Installed]) -> None:
    versions = installed_versions(installed["pipeline"])
    assert versions.pop("tierkeeper") == "0.1.0"
    assert versions == constraint_pins()


def test_operator_holds_the_pins_without_spark(installed: dict[str, Installed]) -> None:
    versions = installed_versions(installed["operator"])
    versions.pop("tierkeeper")
    expected = {k: v for k, v in constraint_pins().items() if k not in ("pyspark", "py4j")}
    assert versions == expected
    proc = installed["operator"].run("python", "-c", "import pyspark")
    assert proc.returncode != 0 and "No module named 'pyspark'" in proc.stderr


def test_environments_carry_no_installer(installed: dict[str, Installed]) -> None:
    for env in installed.values():
        assert not (env.venv / "bin" / "pip").exists()
