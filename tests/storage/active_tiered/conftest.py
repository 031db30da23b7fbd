import pytest

from support.tiered import TieredCluster


@pytest.fixture
def make_cluster(tmp_path, s3_endpoint):
    """Start a TieredCluster with extra broker environment; stopped at teardown."""
    started: list[TieredCluster] = []

    def start(**broker_env: str) -> TieredCluster:
        cluster = TieredCluster(tmp_path / f"cluster-{len(started)}", s3_endpoint, broker_env)
        started.append(cluster)
        return cluster.start()

    yield start
    for cluster in started:
        cluster.stop()
