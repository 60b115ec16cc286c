"""A small tmpfs mounted for a test, so that a full disk is real (tests run as root).

    from tests.tmpfs_fixture import small_tmpfs
    def test_x(tmp_path):
        with small_tmpfs(tmp_path / "disk", "20m") as disk:   # skips if mount fails
            ...

Unmounted (lazily, so a broker still holding files cannot keep it) when the block ends.

    with read_only(disk):    # writes under `disk` fail with EROFS until the block ends
        ...

`mount -o remount,ro` of the tmpfs itself is refused (EBUSY) while a broker holds files
open for writing, so read_only mounts the directory over itself and makes that bind mount
read-only: every open, create, rename or truncate through the path fails with EROFS (an I/O
error that is not ENOSPC), as on a file system the kernel remounted read-only after an
error; descriptors opened before keep writing. Leaving the block removes the bind mount.
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


@contextlib.contextmanager
def read_only(path):
    path = str(path)
    for cmd in (["mount", "--bind", path, path], ["mount", "-o", "remount,bind,ro", path]):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            r = subprocess.CompletedProcess(cmd, 1, "", str(e))
        if r.returncode != 0:
            if cmd[1] != "--bind":
                subprocess.run(["umount", path], capture_output=True, timeout=30)
            pytest.skip(f"cannot make {path} read-only (needs root and mount): "
                        f"{r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", path], capture_output=True, timeout=30)


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
