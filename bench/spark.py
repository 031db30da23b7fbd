"""The one place the harness builds its SparkSession."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# The directory holding the bench/ and broker/ packages: Python workers must import this
# checkout's code, not whatever `kipper` an environment may have installed elsewhere.
SOURCE_ROOT = str(Path(__file__).resolve().parent.parent)
DEFAULT_MASTER = "local[*]"


def spark_session(master: str = DEFAULT_MASTER, app_name: str = "kipper-bench"):
    """A session on ``master`` (reused if one is already running in this process)."""
    # Imported here: `kipper broker` loads bench.cli and should not load Spark.
    from pyspark.sql import SparkSession

    # Local workers are forked from this interpreter's environment; on a cluster the
    # executors need kipper installed (README: "Replay").
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    pythonpath = os.environ.get("PYTHONPATH", "")
    if SOURCE_ROOT not in pythonpath.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (SOURCE_ROOT, pythonpath) if p)
    session = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               # Our own rich progress bar reports replay progress; Spark's would interleave.
               .config("spark.ui.showConsoleProgress", "false")
               # Small jobs: the default 200 shuffle partitions would be 200 tiny tasks.
               .config("spark.sql.shuffle.partitions", "8")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    return session
