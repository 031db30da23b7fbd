"""Make the directories of logs not opened yet: run as a script by ``directories.make_log_dirs``.

Standard library only: the child process starts with ``-I -S`` and imports nothing of kipper.
"""

from __future__ import annotations

import os
import sys

# The file of a new log's first segment (segment.log_file(directory, 0)).
FIRST_SEGMENT_FILE = f"{0:020d}.log"


def make_new_log_dir(directory: str) -> bool:
    """Make the directory of a log not opened yet, and the file of its first segment, as the
    first open would (an empty log starts at offset 0); False, making nothing, when the
    directory exists (a log's data, or one being made)."""
    try:
        os.mkdir(directory)
    except FileExistsError:
        return False
    try:  # O_EXCL: a concurrent open may have made it first, and must keep what it made
        os.close(os.open(os.path.join(directory, FIRST_SEGMENT_FILE),
                         os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        pass
    return True


if __name__ == "__main__":
    for path in sys.argv[1:]:
        try:
            make_new_log_dir(path)
        except OSError as e:  # e.g. a full disk: the log's open meets it, and reports it
            print(f"making {path} ahead of its open failed: {e}", file=sys.stderr)
