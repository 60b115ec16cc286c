"""perf/bench_spark.py needs only the package's [spark] extra: it loads, and its helpers
(the broker process, the memory anchor source) import, with pytest and the test tree
unimportable. (A run needs a Spark session per query kind: not part of the suite.)"""

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

SCRIPT = Path(__file__).resolve().parents[2] / "perf" / "bench_spark.py"

PROBE = """
import runpy, sys
sys.modules["pytest"] = None   # an import of either now raises ImportError
sys.modules["tests"] = None
ns = runpy.run_path(sys.argv[1], run_name="bench_spark")
import fastlog.testing
assert callable(ns["main"]) and callable(ns["batch_scans"])
reader = ns["MemorySource"]({"records": "10", "valueBytes": "4"}).reader(None)
assert [(p.start, p.end) for p in reader.partitions()] == [(0, 5), (0, 5)]
print("ok")
"""


def test_bench_spark_loads_without_pytest_or_the_tests():
    r = subprocess.run([sys.executable, "-c", PROBE, str(SCRIPT)], capture_output=True,
                       text=True, timeout=120, cwd="/")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "ok"
