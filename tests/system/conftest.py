import pytest

from support import Cluster


@pytest.fixture
def cluster(tmp_path):
    started = Cluster(tmp_path).start()
    yield started
    started.stop()
