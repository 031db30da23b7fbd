"""A small file system of a test's own (tmpfs), to fill up: mounted, then unmounted."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


@contextlib.contextmanager
def tmpfs(mount_point: Path, size_mb: int) -> Iterator[Path]:
    """A tmpfs of ``size_mb`` at ``mount_point`` (created), unmounted on exit. Mounting needs
    root, as CI has; elsewhere the test is skipped, saying why."""
    mount_point.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs",
                              str(mount_point)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root, as in CI): "
                    f"{mounted.stderr.strip() or mounted.returncode}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def free_bytes(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize
