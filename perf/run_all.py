"""`make perf`: every perf script in quick mode, one after another.

Runs the micro-benchmarks (codec, log, network, protocol) with small sizes, then
compare.py --quick and cleaner_latency.py with a small topic, each as a subprocess with a
time limit, and prints each script's last JSON line under its name (its last line when it
prints no JSON; a failing script's output goes to stderr).
Exit status: the number of scripts that failed. Figures are noisy on a shared machine;
the full runs and their write-up are in perf/README.md.
Usage: .venv/bin/python perf/run_all.py [--only NAME[,NAME]] [--timeout SECONDS]
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

SCRIPTS = {
    "bench_codec": ["bench_codec.py", "--quick"],
    "bench_log": ["bench_log.py", "--append-mib", "64", "--recovery-mib", "128"],
    "bench_net": ["bench_net.py", "--reps", "1", "--small-seconds", "1", "--large-mib", "512",
                  "--modes", "inline"],
    "bench_protocol": ["bench_protocol.py", "--seconds", "0.3"],
    "compare": ["compare.py", "--quick", "--json"],
    "cleaner_latency": ["cleaner_latency.py", "--records", "300000", "--segment-mib", "4",
                        "--probe-seconds", "3", "--json"],
}


def last_json_line(text: str):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(SCRIPTS), help="comma-separated script names")
    ap.add_argument("--timeout", type=float, default=900.0, help="per script, seconds")
    opts = ap.parse_args(argv)
    failed = 0
    for name in opts.only.split(","):
        if name not in SCRIPTS:
            print(f"run_all: unknown script '{name}' (known: {', '.join(SCRIPTS)})",
                  file=sys.stderr)
            failed += 1
            continue
        script, *args = SCRIPTS[name]
        start = time.monotonic()
        try:
            r = subprocess.run([sys.executable, str(HERE / script), *args], capture_output=True,
                               text=True, timeout=opts.timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            print(f"{name}: timed out after {opts.timeout:.0f}s", flush=True)
            failed += 1
            continue
        result = last_json_line(r.stdout)
        took = time.monotonic() - start
        if r.returncode != 0 or not r.stdout.strip():
            failed += 1
            print(f"{name}: FAILED (exit {r.returncode}, {took:.0f}s)", flush=True)
            sys.stderr.write(r.stderr[-3000:])
            continue
        if result is None:  # a script without a JSON summary: its last line
            print(f"{name} ({took:.0f}s, no JSON line): {r.stdout.strip().splitlines()[-1]}",
                  flush=True)
            continue
        print(f"{name} ({took:.0f}s): {json.dumps(result)}", flush=True)
    return failed


if __name__ == "__main__":
    sys.exit(main())
