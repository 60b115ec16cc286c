"""Running perf/ scripts from their tests."""

import subprocess
import sys


def assert_refused(script, *args, needle):
    """`python script args...` refuses the options: exit 2, one sentence naming `needle`
    on stderr, no traceback."""
    r = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and needle in r.stderr
    assert "Traceback" not in r.stderr
