"""pytest fixtures around fastlog.testing.BrokerProcess (a real `fastlog-server`
subprocess; see fastlog/testing.py for what it does and how it waits).

    from fastlog.testing import BrokerProcess
    with BrokerProcess(tmp_path / "data", overrides={"num.partitions": "3"}) as b:
        b.bootstrap          # "127.0.0.1:<port>"

pytest fixtures `broker` (one per module) and `broker_factory` live in
tests/server/conftest.py; other folders import them from here via `broker_fixtures()`.
A broker that does not start raises fastlog.testing.BrokerStartError, an AssertionError,
so the test fails with the broker's log tail.
"""

from __future__ import annotations

import pytest

from fastlog.testing import BrokerProcess


def broker_fixtures(overrides: dict | None = None):
    """(broker, broker_factory) pytest fixtures; assign both in a conftest.py:

        from tests.broker_fixture import broker_fixtures
        broker, broker_factory = broker_fixtures()

    `overrides`: settings of every broker they start (a test module that needs them
    assigns its own pair the same way)."""

    @pytest.fixture(scope="module")
    def broker(tmp_path_factory):
        """One broker per test module (tests must use their own topic names)."""
        b = BrokerProcess(tmp_path_factory.mktemp("broker") / "data", overrides)
        b.start()
        yield b
        if b.alive():
            code = b.stop()
            assert code == 0, f"broker exited with {code}:\n{b.log_tail()}"

    @pytest.fixture
    def broker_factory(tmp_path):
        """Start extra brokers with their own overrides; all stopped at teardown."""
        made: list[BrokerProcess] = []

        def make(more=None, name="data") -> BrokerProcess:
            b = BrokerProcess(tmp_path / name, {**(overrides or {}), **(more or {})})
            made.append(b)
            return b.start()

        yield make
        for b in made:
            if b.alive():
                b.stop()

    return broker, broker_factory
