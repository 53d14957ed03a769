"""Shared by the tests that prove credentials never show: a directory laid out as the kubelet mounts a
Secret, and the one scan of captured text for known secret values."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def leaks(text: str, secrets: Iterable[str]) -> list[str]:
    """The secrets found in ``text``; also a long fragment, in case a message cut or wrapped the value."""
    return [s for s in secrets if s in text or s[:12] in text]


def secret_volume(root: Path, values: dict[str, str]) -> Path:
    """A directory as the kubelet mounts a Secret: files are symlinks into a ``..data`` directory."""
    data = root / "..2026_11_23_00_00_00.000000001"
    data.mkdir(parents=True)
    for key, value in values.items():
        (data / key).write_text(value)
    (root / "..data").symlink_to(data.name)
    for key in values:
        (root / key).symlink_to(f"..data/{key}")
    return root
