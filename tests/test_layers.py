"""The layer order of SPEC.md — protocol → storage → replication → coordinator → broker →
bench, nothing importing a higher layer, also under TYPE_CHECKING — as import-linter checks
it with the contract in pyproject.toml ([tool.importlinter])."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_no_module_imports_a_higher_layer():
    lint_imports = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
