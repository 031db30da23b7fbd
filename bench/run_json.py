"""The JSON a bench run leaves for ``bench.findings``: its settings, wall time and results."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def write_run(path: Path, args: argparse.Namespace, wall_s: float, **results: list[dict]) -> None:
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    path.write_text(json.dumps({"settings": settings, "wall_s": wall_s, **results}, indent=2))
    print(f"wrote {path}")
