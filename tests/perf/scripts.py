"""Running perf/ scripts from their tests."""

import math
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


def check_rate(reported, amount, elapsed, rounding):
    """`reported` is `amount` over `elapsed`, within the report's rounding (`rounding` on the
    rate, 0.05 ms on the elapsed time)."""
    # the true elapsed time lies within 0.05 ms of the reported one, so the true rate lies
    # between the amount over the longest and over the shortest such time (a fast consume of
    # a few records can take well under a millisecond, where a linear bound is too tight)
    low = amount / (elapsed + 0.00005)
    high = amount / (elapsed - 0.00005) if elapsed > 0.00005 else float("inf")
    slack = rounding * 1.01
    assert low * 0.9999 - slack <= reported <= high * 1.0001 + slack


def assert_figures(report: dict, *keys: str) -> None:
    """Each of `keys` is in `report` as a finite number of at least zero: a well-formed
    figure. (What the figure is worth is perf/'s to measure, never a test's.)"""
    for key in keys:
        value = report[key]
        assert isinstance(value, (int, float)) and math.isfinite(value) and value >= 0, \
            (key, value)
