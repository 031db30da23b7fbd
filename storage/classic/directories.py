"""Making and removing thousands of partition directories without holding up the event loop.

A topic of 5,000 partitions created or deleted makes or removes 5,000 directories on every
broker hosting its replicas: tens of thousands of system calls. Made from a thread, each call
handed Python's GIL to that thread and back, and on a busy machine each handoff waited for
the scheduler: the event loop's thread, which needs the GIL for every step, stood still for
50-140 ms at a time (the records of 8 partitions applied in 0.3 ms of its CPU took 102 ms).
So child processes make those calls: ``new_log_dirs.py`` (standard library only, started in
about 20 ms) makes directories, ``rm -rf`` removes them; the thread that waits for a child
takes the GIL twice. The children run at the lowest priority (``nice -n 19``): three brokers'
``rm -rf`` of a deleted topic's directories, started together, kept both cores of a small
machine busy in the kernel, and every broker's event loop stood still at once (75-95 ms).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

from . import move_log_dirs, new_log_dirs

log = logging.getLogger(__name__)
# Directories one ``rm`` removes at most (its arguments stay far below the system's limit).
REMOVALS_PER_CHILD = 1000
# How long deleted directories are collected before a child removes them together.
REMOVAL_COLLECT_S = 0.1
# What the children's commands start with: the lowest priority, where ``nice`` exists.
_LOWEST_PRIORITY = ["nice", "-n", "19"] if shutil.which("nice") else []


def _run(command: list[str], what: str) -> None:
    """Run ``command``; what it says on stderr, or why it could not start, is logged (a log
    whose directory was not made makes it as it opens; one not removed is removed at the
    next start)."""
    try:
        result = subprocess.run(_LOWEST_PRIORITY + command, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    except OSError as e:
        log.warning("%s: %s", what, e)
        return
    for line in result.stderr.splitlines():
        log.warning("%s: %s", what, line)


def make_log_dirs(paths: list[str]) -> None:
    """``new_log_dirs.make_new_log_dir`` of each path, in a child process; blocks (call it
    from a thread). A path that fails is logged; its log's open meets the error."""
    _run([sys.executable, "-I", "-S", new_log_dirs.__file__, *paths],
         "making log directories")


def move_log_dirs_aside(moves: list[tuple[str, str]]) -> None:
    """Rename each (directory, new name), in a child process; blocks. A directory missing is
    skipped; one that cannot be renamed is logged and stays."""
    _run([sys.executable, "-I", "-S", move_log_dirs.__file__,
          *(name for move in moves for name in move)], "moving deleted log directories aside")


def remove_trees(paths: list[str]) -> None:
    """Remove the directories and everything in them, in a child process; blocks."""
    _run(["rm", "-rf", "--", *paths], "removing deleted log directories")


class Trash:
    """Directories renamed aside for deletion (checkpoint.move_aside_for_deletion), removed
    in the background, together: a topic's deletion renames its directories one at a time,
    and one child removes all those renamed meanwhile. What is left at a stop is removed at
    the next start (LogManager)."""

    def __init__(self) -> None:
        self._queued: list[str] = []
        self._emptying: asyncio.Task | None = None

    def add(self, directory: Path) -> None:
        self._queued.append(os.fspath(directory))
        loop = asyncio.get_running_loop()
        task = self._emptying
        if task is None or task.done() or task.get_loop() is not loop:
            self._emptying = loop.create_task(self._empty())

    async def emptied(self) -> None:
        """Once everything added so far is removed."""
        while self._emptying is not None and not self._emptying.done():
            await asyncio.shield(self._emptying)

    async def _empty(self) -> None:
        while self._queued:
            await asyncio.sleep(REMOVAL_COLLECT_S)
            batch = self._queued[:REMOVALS_PER_CHILD]
            del self._queued[:REMOVALS_PER_CHILD]
            await asyncio.to_thread(remove_trees, batch)


# The process's trash: its logs' deletions (ClassicLog.delete, LogManager.delete_partition).
TRASH = Trash()
