"""Consume throughput through a real broker over TLS against plaintext, in one run.

A fetch over TLS cannot use sendfile: the broker reads the file regions and encrypts them
(fastlog/_net.pyx). This script makes a throwaway CA and a localhost certificate with the
`openssl` command, starts a fastlog broker with a PLAINTEXT and an SSL listener on free
127.0.0.1 ports, fills topic `t` with --records records of --record-size bytes
(`fastlog perf produce`, plaintext), then reads them all with `fastlog perf consume`
(librdkafka) over each listener in turn, --reps times, alternating. Prints each read's
records/s and MB/s and, as the last line (--json: every line is JSON), the median TLS
throughput over the median plaintext one. Every run is bounded by its record count and a
timeout.

Usage: .venv/bin/python perf/tls_consume.py [--records N] [--record-size B] [--reps R] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from compare import RunError, fastlog_perf  # noqa: E402

from fastlog.testing import BrokerProcess  # noqa: E402

TOPIC = "t"


def make_certificate(d: Path) -> tuple[Path, Path]:
    """(CA file, broker keystore) for localhost/127.0.0.1, valid for a day."""
    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=perf-ca")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", "broker.key", "-out", "broker.csr", "-subj", "/CN=localhost")
    (d / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-days", "1", "-out", "broker.pem", "-extfile", "san.ext")
    keystore = d / "broker.keystore.pem"
    keystore.write_text((d / "broker.key").read_text() + (d / "broker.pem").read_text())
    return d / "ca.pem", keystore


def consume(bootstrap: str, records: int, extra: list[str]) -> dict:
    s = fastlog_perf(["consume", "--bootstrap-server", bootstrap, "--topic", TOPIC,
                      "--num-records", records, "--client", "confluent", "--duration", 300,
                      *extra], timeout=360)
    return {"records_per_s": s["records_per_s"], "mb_per_s": s["mb_per_s"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=2_000_000, help="records (default 2,000,000)")
    ap.add_argument("--record-size", type=int, default=100, help="bytes each (default 100)")
    ap.add_argument("--reps", type=int, default=3, help="reads per listener (default 3)")
    ap.add_argument("--json", action="store_true", help="JSON lines only")
    opts = ap.parse_args(argv)
    if not 1 <= opts.records <= 50_000_000 or not 1 <= opts.record_size <= 1 << 20 \
            or not 1 <= opts.reps <= 20:
        print("tls_consume: --records must be 1 to 50,000,000, --record-size 1 to 1 MiB and "
              "--reps 1 to 20", file=sys.stderr)
        return 2
    results: dict[str, list[dict]] = {"plaintext": [], "tls": []}
    with tempfile.TemporaryDirectory(prefix="fastlog-tls-consume-") as tmp:
        ca, keystore = make_certificate(Path(tmp))
        broker = BrokerProcess(Path(tmp) / "data", {
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore),
            "num.partitions": "1"}, startup_timeout=60)
        broker.start()
        try:
            fastlog_perf(["produce", "--bootstrap-server", broker.bootstrap, "--topic", TOPIC,
                          "--num-records", opts.records, "--record-size", opts.record_size,
                          "--acks", "1", "--client", "confluent"], timeout=600)
            ssl_at = f"127.0.0.1:{broker.ports['SSL']}"
            tls = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={ca}"]
            for rep in range(opts.reps):
                for kind, bootstrap, extra in (("plaintext", broker.bootstrap, []),
                                               ("tls", ssl_at, tls)):
                    r = consume(bootstrap, opts.records, extra)
                    results[kind].append(r)
                    line = {"rep": rep, "listener": kind, **r}
                    print(json.dumps(line) if opts.json else
                          f"rep {rep} {kind:9}: {r['records_per_s']:,.0f} records/s, "
                          f"{r['mb_per_s']:.1f} MB/s", flush=True)
        except RunError as e:
            print(f"tls_consume: {e}", file=sys.stderr)
            return 1
        finally:
            broker.stop(timeout=60)
    med = {k: statistics.median(r["records_per_s"] for r in v) for k, v in results.items()}
    print(json.dumps({"tls_vs_plaintext": round(med["tls"] / med["plaintext"], 2),
                      "median_records_per_s": med}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
