# tests/spark/standalone.py: a real Spark standalone cluster for tests, from PySpark's own
# distribution.
#
# Owns SparkStandalone: one master and N workers, each a separate JVM started with
# `spark-class org.apache.spark.deploy.master.Master` / `...deploy.worker.Worker` on
# 127.0.0.1 with kernel-chosen ports (port 0; the bound ports are read from their logs),
# small memory, one core per worker, and each in its own process group so that killing a
# worker also kills its executor and that executor's Python workers, as losing a machine
# would. Workers get PYTHONPATH to this tree (fastlog and its built .so files), so
# executors import fastlog as an installed package. Every wait is bounded; stop() ends
# whatever is still running. Called from one thread (a pytest fixture).

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_MASTER_URL = re.compile(r"Starting Spark master at (spark://[\d.]+:\d+)")
_REGISTERED = "Successfully registered with master"


def spark_home() -> str:
    import pyspark
    return str(Path(pyspark.__file__).resolve().parent)


class SparkStandaloneError(AssertionError):
    """A daemon did not start in time; the message ends with its log's tail."""


class _Daemon:
    def __init__(self, name: str, args: list[str], env: dict, workdir: Path):
        self.name = name
        self.log_path = workdir / f"{name}.log"
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [str(Path(spark_home()) / "bin" / "spark-class"), *args], stdout=log,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=workdir,
            start_new_session=True)
        log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, pattern, timeout: float) -> re.Match | str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log()
            found = pattern.search(text) if isinstance(pattern, re.Pattern) else (
                pattern if pattern in text else None)
            if found:
                return found
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        tail = "\n".join(self.log().splitlines()[-30:])
        raise SparkStandaloneError(f"{self.name} not ready within {timeout:.0f} s "
                                   f"(exit {self.proc.poll()}):\n{tail}")

    def kill(self) -> None:
        """SIGKILL the daemon's process group: the JVM and the processes it started."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        self.kill()


class SparkStandalone:
    """spark://127.0.0.1:<port> with `workers` workers of one core and worker_memory each.

        with SparkStandalone(tmp_path, workers=2) as cluster:
            SparkSession.builder.master(cluster.url).config(...)
            cluster.kill_worker(0)
    """

    def __init__(self, workdir, workers: int = 2, worker_memory: str = "768m",
                 timeout: float = 90.0):
        self.workdir = Path(workdir)
        self.n_workers = workers
        self.worker_memory = worker_memory
        self.timeout = timeout
        self.master: _Daemon | None = None
        self.workers: list[_Daemon] = []
        self.url = ""

    def env(self) -> dict:
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        return dict(os.environ, SPARK_HOME=spark_home(), SPARK_LOCAL_IP="127.0.0.1",
                    SPARK_DAEMON_MEMORY="256m", PYTHONPATH=path,
                    PYSPARK_PYTHON=sys.executable, SPARK_LOG_DIR=str(self.workdir),
                    SPARK_CONF_DIR=str(self.workdir / "conf"),
                    SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
                    SPARK_WORKER_OPTS="-Dspark.worker.cleanup.enabled=false")

    def start(self, wait_workers: bool = True) -> SparkStandalone:
        """Start the master, then the workers once its URL is known; wait_workers=False
        returns as soon as the workers are started (a driver may start meanwhile and wait
        for its executors), wait_workers() then waits for their registration."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "conf").mkdir(exist_ok=True)
        env = self.env()
        self._deadline = time.monotonic() + self.timeout
        try:
            self.master = _Daemon("master", [
                "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                "--port", "0", "--webui-port", "0"], env, self.workdir)
            self.url = self.master.wait_for(_MASTER_URL, self.timeout).group(1)
            for i in range(self.n_workers):
                wdir = self.workdir / f"worker-{i}"
                wdir.mkdir(exist_ok=True)
                self.workers.append(_Daemon(f"worker-{i}", [
                    "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                    "--port", "0", "--webui-port", "0", "--cores", "1",
                    "--memory", self.worker_memory, "--work-dir", str(wdir), self.url],
                    env, wdir))
            if wait_workers:
                self.wait_workers()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_workers(self) -> None:
        for w in self.workers:
            w.wait_for(_REGISTERED, max(1.0, self._deadline - time.monotonic()))

    def kill_worker(self, i: int) -> None:
        """Lose worker i as a machine would be lost: its JVM, executor and Python workers."""
        self.workers[i].kill()

    def stop(self) -> None:
        for d in [*self.workers, self.master]:
            if d is not None:
                d.stop()

    def __enter__(self) -> SparkStandalone:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
