"""Shared helpers of the test suite, one module per concern (see tests/README.md).

conftest.py files import fixtures from here; test modules import helpers from the submodules,
e.g. ``from support.processes import BrokerProcess``.
"""
