"""Fixtures for the `fastlog` CLI tests: a real fastlog-server per module, a unique topic
name and a closed port (tests/client_fixture.py; FASTLOG_TEST_BOOTSTRAP=host:port uses an
already running broker instead), and `fastlog` itself run as a subprocess through its
installed entry point (.venv/bin/fastlog).
"""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.client_fixture import bootstrap, closed_port, topic_name  # noqa: F401 - fixtures

FASTLOG = Path(sys.executable).with_name("fastlog")


@pytest.fixture
def fastlog():
    """fastlog(*args, input=b"") -> CompletedProcess (stdout/stderr as text), 60 s bound."""
    def run(*args, input: bytes = b"", timeout: float = 60):
        cmd = [str(FASTLOG)] if FASTLOG.exists() else [sys.executable, "-m", "fastlog.cli.main"]
        proc = subprocess.run(cmd + [str(a) for a in args], input=input, capture_output=True,
                              timeout=timeout)
        proc.stdout = proc.stdout.decode(errors="replace")
        proc.stderr = proc.stderr.decode(errors="replace")
        return proc
    return run
