"""Small durable files in a partition directory (checkpoints and the clean-shutdown marker).

They are rewritten whole through a temporary file and a rename, so a crash leaves either the
old or the new content, never a torn mix.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import uuid
from pathlib import Path


def fsync_dir(directory: Path | str) -> None:
    # Makes file creations, renames and deletions in the directory durable.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# A partition directory being deleted: renamed at once (a new partition of the same name
# may be created meanwhile), then removed off the event loop; what a crash leaves is
# removed at the next start.
DELETED_DIR_SUFFIX = "-delete"


def deletion_name(directory: Path) -> Path:
    """The name ``directory`` is renamed to for deletion (unique: a partition of the same
    name may be deleted again before the first is removed)."""
    return directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{DELETED_DIR_SUFFIX}")


def move_aside_for_deletion(directory: Path) -> Path | None:
    """Rename ``directory`` for deletion; the new path (None: there was none)."""
    doomed = deletion_name(directory)
    try:
        os.rename(directory, doomed)
    except FileNotFoundError:
        return None
    return doomed


def sync_file_system(directory: Path) -> None:
    """Make everything written to the file system holding ``directory`` durable: one call
    instead of an fsync per file when thousands of files were written (closing every log)."""
    if sys.platform == "linux":
        fd = os.open(directory, os.O_RDONLY)
        try:
            if ctypes.CDLL(None, use_errno=True).syncfs(fd) == 0:
                return
        finally:
            os.close(fd)
    os.sync()


def write_atomically(path: Path | str, content: str | bytes, *, sync: bool = True) -> None:
    """Without ``sync`` the caller makes it durable later (sync_file_system). Plain system
    calls, as ``read_file``: a broker closing thousands of logs writes several of these
    per log."""
    tmp = f"{os.fspath(path)}.tmp"
    data = content if isinstance(content, bytes) else content.encode("ascii")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        # A failed write (a full disk) must not leave its partial copy taking space.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    os.replace(tmp, path)
    if sync:
        fsync_dir(os.path.dirname(os.fspath(path)))


def read_file(path: Path | str) -> bytes | None:
    """The bytes of a small file (a checkpoint, a segment's index), None if there is none.
    Plain system calls: a broker reads several of these per log when it opens thousands
    of them, and ``Path.read_text``/``read_bytes`` took several times as long."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_small_file(path: Path | str) -> str | None:
    """The text of a checkpoint file (ASCII, a few kilobytes at most), None if there is
    none."""
    data = read_file(path)
    return None if data is None else data.decode("ascii")


def read_offset(path: Path | str) -> int | None:
    try:
        text = read_small_file(path)
        return None if text is None else int(text.strip())
    except ValueError:  # UnicodeDecodeError included
        # A checkpoint is an optimisation or a lower bound; an unreadable one is ignored
        # rather than keeping the partition offline.
        return None


def write_offset(path: Path | str, offset: int, *, sync: bool = True) -> None:
    write_atomically(path, f"{offset}\n", sync=sync)
