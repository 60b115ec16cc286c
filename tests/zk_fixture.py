# A real Apache ZooKeeper for tests: Debian's `zookeeper` package (3.8) started as one JVM
# on a kernel-chosen free 127.0.0.1 port with its data in a temporary directory.
# Reusable from any test folder: `ZooKeeperServer(workdir).start()` gives `.hosts`
# ("127.0.0.1:PORT"); `make_chroot()` gives a fresh per-test namespace the way
# `zookeeper.connect=host:port/chroot` does; `expire_session()` ends a kazoo client's
# session for real on the server (kazoo's own test harness only fakes it client-side).
# Used from the pytest main thread only.

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid

ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"
SLF4J_SIMPLE_JAR = "/usr/share/java/slf4j-simple.jar"
_PR_SET_PDEATHSIG = 1


def zookeeper_available() -> bool:
    return os.path.exists(ZOOKEEPER_JAR) and shutil.which("java") is not None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    # Runs in the child between fork and exec: if pytest dies, the kernel kills the JVM.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def four_letter(port: int, word: str, timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command ('srvr', 'stat', 'cons' ...) and return the reply."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(word.encode())
        chunks = []
        while True:
            data = s.recv(4096)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode("utf-8", "replace")


class ZooKeeperServer:
    """One standalone ZooKeeper JVM; start/stop/kill/restart keep the port and the data."""

    def __init__(self, workdir, *, tick_ms: int = 500, port: int | None = None):
        self.workdir = os.fspath(workdir)
        self.tick_ms = tick_ms
        self.port = port or _free_port()
        # A port picked here is only free until the JVM binds it: another process may take
        # it in between, so the first start moves to a new port then; restarts retry the
        # same port for a while (see start()).
        self._may_move_port = port is None
        self.proc: subprocess.Popen | None = None
        self._log = None
        atexit.register(self.kill)

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _write_config(self) -> str:
        data_dir = os.path.join(self.workdir, "data")
        os.makedirs(data_dir, exist_ok=True)
        cfg = os.path.join(self.workdir, "zoo.cfg")
        with open(cfg, "w") as f:
            f.write(
                f"tickTime={self.tick_ms}\n"
                f"dataDir={data_dir}\n"
                f"clientPort={self.port}\n"
                "clientPortAddress=127.0.0.1\n"
                "maxClientCnxns=0\n"
                "admin.enableServer=false\n"
                "4lw.commands.whitelist=*\n"
                f"minSessionTimeout={2 * self.tick_ms}\n"
                "maxSessionTimeout=60000\n"
                "forceSync=no\n"
            )
        return cfg

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        if self.proc is not None and self.proc.poll() is None:
            return self
        deadline = time.monotonic() + timeout
        while True:
            log_path = os.path.join(self.workdir, "zookeeper.log")
            log_start = os.path.getsize(log_path) if os.path.exists(log_path) else 0
            self._spawn()
            try:
                self.wait_ready(timeout)
            except RuntimeError:
                with open(log_path, "rb") as f:
                    f.seek(log_start)
                    bind_failed = b"Address already in use" in f.read()
                self._end(signal.SIGKILL, 5)
                if not bind_failed or time.monotonic() >= deadline:
                    raise
                if self._may_move_port:
                    self.port = _free_port()  # lost the race for the port: take another
                else:
                    # A restart must keep its port; while ZooKeeper was down a reconnecting
                    # client may hold it briefly (even connected to itself): retry.
                    time.sleep(0.5)
                continue
            self._may_move_port = False  # clients now know this port: restarts keep it
            return self

    def _spawn(self) -> None:
        cfg = self._write_config()
        classpath = ZOOKEEPER_JAR
        if os.path.exists(SLF4J_SIMPLE_JAR):
            classpath += ":" + SLF4J_SIMPLE_JAR
        self._log = open(os.path.join(self.workdir, "zookeeper.log"), "ab")
        self.proc = subprocess.Popen(
            [
                "java", "-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-XX:-UsePerfData", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp", classpath, "org.apache.zookeeper.server.ZooKeeperServerMain", cfg,
            ],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=_die_with_parent,
        )

    def wait_ready(self, timeout: float = 30.0) -> None:
        # `ruok` answers before the server serves requests; `srvr` says so only when it does.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}; see "
                                   f"{self.workdir}/zookeeper.log")
            try:
                if "Mode: standalone" in four_letter(self.port, "srvr", timeout=0.5):
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"ZooKeeper on port {self.port} not serving after {timeout} s")

    def _end(self, sig: int, wait: float) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(sig)
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
            except ProcessLookupError:
                pass
        self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self) -> None:
        """Graceful stop (SIGTERM); sessions and data stay on disk."""
        self._end(signal.SIGTERM, 10)

    def kill(self) -> None:
        """Crash (SIGKILL); sessions and data still survive in the data dir."""
        self._end(signal.SIGKILL, 5)

    def restart(self) -> None:
        self.stop()
        self.start()


def make_chroot(hosts: str, prefix: str = "t") -> str:
    """Create a fresh chroot on the server and return 'host:port/<chroot>'."""
    from kazoo.client import KazooClient

    chroot = f"/{prefix}-{uuid.uuid4().hex[:12]}"
    zk = KazooClient(hosts=hosts, timeout=5.0)
    zk.start(timeout=15)
    try:
        zk.ensure_path(chroot)
    finally:
        zk.stop()
        zk.close()
    return hosts + chroot


def expire_session(client, hosts: str, timeout: float = 10.0) -> None:
    """End `client`'s session on the server for real: connect a second client with the same
    session id and password and close it. The server deletes the session's ephemeral nodes
    and `client` sees LOST, then reconnects with a new session."""
    from kazoo.client import KazooClient

    old_session = client.client_id[0]
    clone = KazooClient(hosts=hosts.split("/", 1)[0], client_id=client.client_id, timeout=5.0)
    clone.start(timeout=timeout)
    clone.stop()
    clone.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cid = client.client_id
        if cid is not None and cid[0] != old_session and client.connected:
            return
        time.sleep(0.02)
    raise TimeoutError("client did not reconnect with a new session after expiry")


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02, what: str = "condition"):
    """Poll `predicate` until it returns a truthy value (returned) or fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def zk_server_fixture():
    """A session-scoped `zk_server` fixture (one real ZooKeeper, killed at the end);
    assign it in a conftest.py: ``zk_server = zk_server_fixture()``."""
    import pytest

    @pytest.fixture(scope="session")
    def zk_server(tmp_path_factory):
        if not zookeeper_available():
            pytest.skip("Debian package 'zookeeper' (and java) not installed: "
                        "run scripts/install-system-deps.sh")
        server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
        yield server
        server.kill()

    return zk_server
