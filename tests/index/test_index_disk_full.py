"""Index appends on a full disk fail with ENOSPC instead of killing the process (SIGBUS):
index space is reserved with posix_fallocate before entries are stored into the mapping."""

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.tmpfs_fixture import small_tmpfs

_ROOT = str(Path(__file__).resolve().parents[2])

_CHILD = textwrap.dedent("""
    import errno, sys
    from fastlog._index import OffsetIndex, TimeIndex
    from tests.tmpfs_fixture import fill
    d = sys.argv[1]
    oi = OffsetIndex(d + "/00000000000000000000.index", 0, 1024 * 1024)
    ti = TimeIndex(d + "/00000000000000000000.timeindex", 0, 1024 * 1024)
    fill(d)
    for i in range(100000):
        try:
            oi.append(i, i * 10)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
            print("offset", i)
            break
    for i in range(100000):
        try:
            ti.maybe_append(1000 + i, i)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
            print("time", i)
            break
    oi.close(); ti.close()
    print("ok")
""")


def test_index_append_on_full_disk_is_enospc_not_sigbus(tmp_path):
    with small_tmpfs(tmp_path / "disk", "1m") as disk:
        r = subprocess.run([sys.executable, "-c", _CHILD, str(disk)], capture_output=True,
                           text=True, timeout=120, cwd=_ROOT)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    lines = r.stdout.split()
    assert lines[-1] == "ok"
    # Both indexes stopped at a page boundary with ENOSPC (the first entries fit the
    # already reserved page, if any).
    assert "offset" in lines and "time" in lines
