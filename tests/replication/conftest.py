import pytest

from support.processes import Cluster


@pytest.fixture
def cluster(tmp_path):
    started = Cluster(tmp_path).start()
    yield started
    started.stop()
