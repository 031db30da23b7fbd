import pytest

from bench.spark import spark_session


@pytest.fixture(scope="session")
def spark():
    """One local[2] session (one JVM) for every Spark test of the run."""
    session = spark_session("local[2]", app_name="kipper-bench-tests")
    yield session
    session.stop()
