"""ShellCheck for the e2e scripts: the one on PATH, else Debian's package unpacked into the harness cache.

Debian's ``shellcheck`` package is fetched with ``apt-get download`` (no root needed once the package
lists exist) and its binary extracted with ``dpkg-deb``, so a Debian machine without it installed still
lints the scripts. Elsewhere, install ShellCheck from the system's packages.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from harness.kafka_dist import HarnessError
from harness.tools import tools_dir


def _download_debian_package(target: Path) -> None:
    apt_get, dpkg_deb = shutil.which("apt-get"), shutil.which("dpkg-deb")
    if apt_get is None or dpkg_deb is None:
        raise HarnessError(
            "shellcheck is not on PATH and this is no Debian system to fetch it from; install it"
        )
    with tempfile.TemporaryDirectory(prefix="shellcheck-") as tmp:
        proc = subprocess.run(
            [apt_get, "download", "shellcheck"],
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        debs = list(Path(tmp).glob("shellcheck_*.deb"))
        if proc.returncode != 0 or len(debs) != 1:
            raise HarnessError(
                f"apt-get download shellcheck failed ({proc.stderr.strip()[-500:]}); "
                "run `apt-get update` or install shellcheck"
            )
        subprocess.run([dpkg_deb, "-x", str(debs[0]), str(Path(tmp) / "root")], check=True, timeout=120)
        partial = target.with_suffix(".partial")
        shutil.copyfile(Path(tmp) / "root" / "usr" / "bin" / "shellcheck", partial)
        partial.chmod(0o755)
        os.replace(partial, target)  # last, so a concurrent run never executes a half-written binary


def shellcheck_path() -> Path:
    on_path = shutil.which("shellcheck")
    if on_path:
        return Path(on_path)
    cached = tools_dir() / "shellcheck"
    if not os.access(cached, os.X_OK):
        _download_debian_package(cached)
    return cached
