"""Fixtures for the broker's tests: a real fastlog-server subprocess (tests/broker_fixture.py)."""

from tests.broker_fixture import broker_fixtures

broker, broker_factory = broker_fixtures()
