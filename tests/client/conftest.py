"""Fixtures for fastlog.client tests: `bootstrap` (one real fastlog-server per test
module, or FASTLOG_TEST_BOOTSTRAP), `topic_name` and `closed_port` from
tests/client_fixture.py, and `arun` to run a coroutine.
"""

import asyncio

import pytest

from tests.client_fixture import bootstrap, closed_port, topic_name  # noqa: F401 - fixtures


@pytest.fixture
def arun():
    """arun(coro): run one coroutine to completion on a fresh loop, bounded in time."""
    def run(coro, timeout: float = 60):
        return asyncio.run(asyncio.wait_for(coro, timeout))
    return run
