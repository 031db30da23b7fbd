"""kcat (Debian package), unmodified, run as a subprocess."""

from __future__ import annotations

import shutil
import subprocess

KCAT = shutil.which("kcat") or shutil.which("kafkacat")


def kcat(*args: str, stdin: bytes | None = None, timeout: float = 60) -> str:
    """kcat's stdout; fails the test when it exits non-zero."""
    assert KCAT, "kcat is not installed (apt-get install -y kcat)"
    proc = subprocess.run([KCAT, *args], input=stdin, capture_output=True, timeout=timeout)
    assert proc.returncode == 0, (
        f"kcat {' '.join(args)} exited {proc.returncode}\nstderr:\n"
        f"{proc.stderr.decode(errors='replace')[-3000:]}")
    return proc.stdout.decode()
