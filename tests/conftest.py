from __future__ import annotations

import itertools
import re
import uuid

import pytest

from support import BrokerProcess


@pytest.fixture
def broker_factory(tmp_path):
    """Start brokers with their own data dirs; every one is stopped at teardown."""
    started: list[BrokerProcess] = []
    counter = itertools.count()

    def start(*extra_args: str, data_dir=None) -> BrokerProcess:
        broker = BrokerProcess(data_dir or tmp_path / f"broker-data-{next(counter)}",
                               list(extra_args))
        started.append(broker)
        return broker.start()

    yield start
    for broker in started:
        broker.stop()


@pytest.fixture(scope="session")
def shared_broker(tmp_path_factory):
    """One broker for the tests that only need a place to produce and consume."""
    broker = BrokerProcess(tmp_path_factory.mktemp("shared") / "data").start()
    yield broker
    broker.stop()


@pytest.fixture
def topic_name(request) -> str:
    return f"t-{re.sub(r'[^a-zA-Z0-9._-]', '-', request.node.name[:40])}-{uuid.uuid4().hex[:8]}"
