"""Rename deleted logs' directories aside: run as a script by
``directories.move_log_dirs_aside``.

Arguments: pairs of (directory, new name). Standard library only, like new_log_dirs.py.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    arguments = sys.argv[1:]
    for directory, new_name in zip(arguments[::2], arguments[1::2]):
        try:
            os.rename(directory, new_name)
        except FileNotFoundError:  # never made: nothing to delete
            pass
        except OSError as e:
            print(f"moving {directory} aside for deletion failed: {e}", file=sys.stderr)
