"""A real fastlog-server per test module for the perf harness tests."""

from tests.broker_fixture import broker_fixtures

broker, broker_factory = broker_fixtures()
