"""The ``storage_mode`` fixture: every scenario here that asks for it runs once per storage
mode (support.storage_modes), from one definition.

Each mode's cluster is a session fixture, started once per worker on first use and kept to
the end: classic the shared broker, diskless the diskless cluster (shared with
tests/storage/diskless), active-tiered the tiered cluster, shared the shared-storage cluster. (With ``--dist loadfile`` a worker
moves from mode to mode at every file: a cluster of this package's would start again each
time.)
"""

from __future__ import annotations

import pytest

from support.storage_modes import (MODES, ClassicMode, DisklessMode, SharedMode, StorageMode,
                                   TieredMode, compressions)


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


@pytest.fixture(scope="package")
def storage_mode(request) -> StorageMode:
    if request.param == "classic":
        return ClassicMode(request.getfixturevalue("shared_broker"))
    if request.param == "diskless":
        return DisklessMode(request.getfixturevalue("diskless_cluster"))
    if request.param == "shared":
        return SharedMode(request.getfixturevalue("shared_cluster"))
    return TieredMode(request.getfixturevalue("tiered_cluster"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failing scenario, attach the tail of its brokers' logs to the report."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when in ("call", "teardown"):
        mode = getattr(item, "funcargs", {}).get("storage_mode")
        if mode is not None:
            report.sections.append((f"kipper {mode.name} broker logs (tail)", mode.log_tail()))
