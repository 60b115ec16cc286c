# fastlog/perf/report.py: what a perf run prints.
#
# Owns: Progress (a live one-line status, only when stdout is a terminal and --json is
# off), the summary dict every run returns (records/s, MB/s, latency percentiles, config),
# its text and JSON renderings, and the optional --plot PNG (matplotlib, from the `perf`
# extra). MB means 10^6 bytes. Caller's thread only.
"""Progress line, summary, JSON and plot for perf runs."""

from __future__ import annotations

import json
import sys
import time

from fastlog.client.errors import FastlogError


class Progress:
    """Throughput timeline (every run) and a live status line (terminals only)."""

    def __init__(self, what: str, target: int | None, live: bool):
        self.what = what
        self.target = target
        self.live = live and sys.stdout.isatty()
        self.start = time.perf_counter()
        self._next = self.start + 0.5
        self.timeline: list[tuple[float, int, int]] = [(0.0, 0, 0)]  # (t, records, bytes)

    def tick(self, records: int, nbytes: int) -> None:
        now = time.perf_counter()
        if now < self._next:
            return
        self._next = now + 0.5
        self.timeline.append((now - self.start, records, nbytes))
        if self.live:
            t, r0, b0 = self.timeline[-2]
            dt = max(1e-9, now - self.start - t)
            rate = (records - r0) / dt
            pct = f" {100.0 * records / self.target:5.1f}%" if self.target else ""
            sys.stdout.write(f"\r{self.what}: {records:,} records{pct}  {rate:,.0f} rec/s  "
                             f"{(nbytes - b0) / dt / 1e6:,.1f} MB/s   ")
            sys.stdout.flush()

    def done(self, records: int, nbytes: int) -> None:
        self.timeline.append((time.perf_counter() - self.start, records, nbytes))
        if self.live:
            sys.stdout.write("\r" + " " * 78 + "\r")
            sys.stdout.flush()


def summarize(kind: str, opts, records: int, nbytes: int, elapsed: float, hist,
              errors: int = 0, **extra) -> dict:
    elapsed = max(elapsed, 1e-9)
    out = {
        "kind": kind,
        "client": opts.client,
        "topic": opts.topic,
        "records": records,
        "bytes": nbytes,
        "errors": errors,
        "elapsed_s": round(elapsed, 4),
        "records_per_s": round(records / elapsed, 1),
        "mb_per_s": round(nbytes / elapsed / 1e6, 3),
        "latency": hist.summary() if hist is not None else None,
        "config": {k: getattr(opts, k, None) for k in (
            "record_size", "partitions", "connections", "rate", "acks", "compression",
            "batch_size", "linger_ms", "key_distribution", "key_count")
            if getattr(opts, k, None) is not None},
    }
    out.update(extra)
    return out


def render_text(s: dict) -> str:
    lines = [f"{s['kind']} ({s['client']} client) topic {s['topic']}: {s['records']:,} records, "
             f"{s['bytes'] / 1e6:,.1f} MB in {s['elapsed_s']:.2f} s",
             f"  throughput: {s['records_per_s']:,.0f} records/s, {s['mb_per_s']:,.2f} MB/s"]
    if s.get("errors"):
        lines.append(f"  errors: {s['errors']:,}")
    if s.get("foreign_records"):
        lines.append(f"  skipped: {s['foreign_records']:,} records not sent by this run")
    if s.get("produce_requests"):
        lines.append(f"  produce requests: {s['produce_requests']:,} "
                     f"({s['records_per_request']:,.1f} records each)")
    broker = s.get("broker")
    if broker:
        figures = []
        if "cpu_s" in broker:
            figures.append(f"CPU {broker['cpu_s']:.2f} s")
        if "cpu_us_per_record" in broker:
            figures.append(f"{broker['cpu_us_per_record']:.2f} us CPU/record")
        if "messages_in" in broker:
            figures.append(f"records in {broker['messages_in']:,.0f}")
        for key, label in (("bytes_in", "in"), ("bytes_out", "out")):
            if key in broker:
                figures.append(f"{broker[key] / 1e6:,.1f} MB {label}")
        if broker.get("requests"):
            figures.append("requests " + ", ".join(
                f"{name} {n:,}" for name, n in sorted(broker["requests"].items())))
        lines.append("  broker (its /metrics): " + ", ".join(figures))
    lat = s.get("latency")
    if lat and lat["count"]:
        lines.append(
            f"  latency ms ({lat['count']:,} samples): mean {lat['mean_ms']:.3f}  "
            f"p50 {lat['p50_ms']:.3f}  p95 {lat['p95_ms']:.3f}  p99 {lat['p99_ms']:.3f}  "
            f"p99.9 {lat['p99_9_ms']:.3f}  max {lat['max_ms']:.3f}")
    return "\n".join(lines)


def emit(summary: dict, opts, hist=None, progress: Progress | None = None) -> None:
    if getattr(opts, "plot", None):
        plot(summary, opts.plot, hist, progress)
    if getattr(opts, "json", False):
        print(json.dumps(summary, sort_keys=True))
    else:
        print(render_text(summary))


def check_plot_available(path) -> None:
    """Fail before the run, in one sentence, when --plot cannot work."""
    if not path:
        return
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise FastlogError("--plot needs matplotlib, which is not installed "
                           "(pip install 'fastlog[perf]')") from None


def plot_formats() -> set[str]:
    """File extensions --plot can write (matplotlib's savefig formats)."""
    from matplotlib.figure import Figure

    return set(Figure().canvas.get_supported_filetypes())


def plot(summary: dict, path, hist, progress: Progress | None) -> None:
    """Two panels: throughput over time, and latency by percentile (log scale)."""
    check_plot_available(path)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    tl = progress.timeline if progress else []
    xs, ys = [], []
    for (t0, r0, _), (t1, r1, _) in zip(tl, tl[1:], strict=False):
        if t1 > t0:
            xs.append(t1)
            ys.append((r1 - r0) / (t1 - t0))
    ax1.plot(xs, ys, marker=".")
    ax1.set_xlabel("seconds")
    ax1.set_ylabel("records/s")
    ax1.set_title(f"{summary['kind']} throughput ({summary['client']})")
    ax1.grid(True, alpha=0.3)
    dist = hist.distribution() if hist is not None else []
    if dist:
        ax2.plot([1.0 / max(1e-6, 1.0 - p / 100.0) for p, _ in dist], [ms for _, ms in dist])
        ax2.set_xscale("log")
        ticks = [1, 2, 10, 100, 1000, 10000, 100000]
        ax2.set_xticks(ticks)
        ax2.set_xticklabels(["0", "50", "90", "99", "99.9", "99.99", "99.999"])
        ax2.set_xlim(1, 1e5)
    ax2.set_xlabel("percentile")
    ax2.set_ylabel("latency ms")
    ax2.set_title("latency by percentile")
    ax2.grid(True, alpha=0.3)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=90)
    except OSError as exc:
        raise FastlogError(f"cannot write the plot to {path}: {exc.strerror}") from None
    finally:
        plt.close(fig)
