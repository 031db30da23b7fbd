"""The ``storage_mode`` fixture: every scenario here that asks for it runs once per storage
mode (support.storage_modes), from one definition.

``storage_mode`` is package-scoped and parametrised, so pytest runs all of one mode's tests
together: each mode's cluster is started once (classic: the session's shared broker;
diskless: the session's diskless cluster, shared with tests/storage/diskless; active-tiered:
a cluster of this package, stopped when the run moves on to the next mode).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.storage_modes import (MODES, ClassicMode, DisklessMode, StorageMode, TieredMode,
                                   compressions)
from support.tiered import PATIENT_DOWNLOADS, TieredCluster


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise ``storage_mode``; a client round trip (a test asking for ``compression``
    in a module naming its ``CLIENT``) gets the codecs its mode runs it with."""
    if "storage_mode" not in metafunc.fixturenames:
        return
    if "compression" in metafunc.fixturenames:
        client = metafunc.module.CLIENT
        cases = [pytest.param(mode, codec, id=f"{mode}-{codec}")
                 for mode in MODES for codec in compressions(mode, client)]
        metafunc.parametrize(("storage_mode", "compression"), cases,
                             indirect=["storage_mode"], scope="package")
    else:
        metafunc.parametrize("storage_mode", MODES, indirect=True, scope="package")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run all of one mode's tests together, so each mode's cluster starts once. (pytest groups
    a package-scoped parameter by itself, but with the codec parametrised next to it, it
    interleaves the modes.) A stable sort of the scenario tests among their own positions."""
    def mode_of(item: pytest.Item) -> str | None:
        callspec = getattr(item, "callspec", None)
        return callspec.params.get("storage_mode") if callspec is not None else None

    positions = [i for i, item in enumerate(items) if mode_of(item) is not None]
    ordered = sorted((items[i] for i in positions), key=lambda item: MODES.index(mode_of(item)))
    for position, item in zip(positions, ordered):
        items[position] = item


@pytest.fixture(scope="package")
def storage_mode(request, tmp_path_factory, s3_endpoint) -> Iterator[StorageMode]:
    if request.param == "classic":
        yield ClassicMode(request.getfixturevalue("shared_broker"))
    elif request.param == "diskless":
        yield DisklessMode(request.getfixturevalue("diskless_cluster"))
    else:
        # Topics are active-tiered by default, so each client creates its topic its own way.
        cluster = TieredCluster(tmp_path_factory.mktemp("tiered"), s3_endpoint, PATIENT_DOWNLOADS,
                                broker_args=["--default-storage-mode", "active-tiered"]).start()
        yield TieredMode(cluster)
        cluster.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failing scenario, attach the tail of its brokers' logs to the report."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when in ("call", "teardown"):
        mode = getattr(item, "funcargs", {}).get("storage_mode")
        if mode is not None:
            report.sections.append((f"kipper {mode.name} broker logs (tail)", mode.log_tail()))
