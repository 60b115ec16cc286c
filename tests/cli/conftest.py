"""Fixtures for the `fastlog` CLI tests: a real fastlog-server per module, a unique topic
name and a closed port (tests/client_fixture.py; FASTLOG_TEST_BOOTSTRAP=host:port uses an
already running broker instead), and `fastlog` itself run as a subprocess through its
installed entry point (.venv/bin/fastlog).
"""

import pytest

from tests.client_fixture import bootstrap, closed_port, run_fastlog, topic_name  # noqa: F401


@pytest.fixture
def fastlog():
    """fastlog(*args, input=b"") -> CompletedProcess (stdout/stderr as text), 60 s bound."""
    return run_fastlog
