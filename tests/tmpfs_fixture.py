"""A small tmpfs mounted for a test, so that a full disk is real (tests run as root).

    from tests.tmpfs_fixture import small_tmpfs
    def test_x(tmp_path):
        with small_tmpfs(tmp_path / "disk", "20m") as disk:   # skips if mount fails
            ...

Unmounted (lazily, so a broker still holding files cannot keep it) when the block ends.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_tmpfs(path, size: str):
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root and mount): {e}")
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root): {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def fill(path, chunk: int = 64 * 1024) -> int:
    """Write a file `fill` under `path` until the file system is full; bytes written."""
    total = 0
    fd = os.open(os.path.join(path, "fill"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        block = b"\0" * chunk
        for _ in range(1 << 20):  # bounded: 64 GiB at most
            try:
                total += os.write(fd, block)
            except OSError:
                if chunk == 1:
                    break
                chunk //= 2
                block = block[:chunk]
    finally:
        os.close(fd)
    return total
