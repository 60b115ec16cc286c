# fastlog/testing.py: real `fastlog-server` and ZooKeeper processes for scripts and tests.
#
# Owns: BrokerProcess — start a broker on 127.0.0.1 (port 0 on its first start: the kernel
# picks a free port, no race; the broker prints the bound port on stdout, restarts reuse
# it), wait until it accepts connections, stop it (SIGTERM), kill it (SIGKILL), restart it
# on the same port and data. Its stderr goes to `<data>-broker-<n>.log` beside the data
# directory; a failed start raises BrokerStartError with that log's tail. Every wait is
# bounded. ZooKeeperServer: Debian's `zookeeper` package (3.8) started as one JVM on a
# kernel-chosen free 127.0.0.1 port with its data in a given directory (killed with this
# process), and make_chroot(), a fresh namespace the way `zookeeper.connect=host:port/chroot`
# gives one. Wire: one raw connection speaking Kafka framing (a request encoded with
# fastlog.protocol, its response decoded), for probes that must see the bytes.
# ConsoleProcess: `fastlog console` (the web console) against a bootstrap server on a
# kernel-chosen port, with plain-HTTP get/post. Used by
# perf/ scripts and, through tests/broker_fixture.py and
# tests/zk_fixture.py (pytest fixtures), by the test suite; call it from one thread.
# Needs nothing but the installed package (and kazoo, a dependency, for make_chroot).
"""Start a real fastlog broker (and ZooKeeper, for cluster mode) from a script::

    from fastlog.testing import BrokerProcess
    with BrokerProcess(tmpdir / "data", overrides={"num.partitions": "3"}) as b:
        b.bootstrap          # "127.0.0.1:<port>"
        b.restart()          # SIGTERM + start again on the same port and data
        b.kill()             # SIGKILL (crash), then b.start() to recover

    zk = ZooKeeperServer(tmpdir / "zk").start()     # zk.hosts: "127.0.0.1:PORT"
    hosts = make_chroot(zk.hosts)                   # "127.0.0.1:PORT/t-<random>"
    ...; zk.kill()

The broker command is $FASTLOG_TEST_SERVER (split on spaces) when set, else the
`fastlog-server` script beside the running Python, else `python -m fastlog.cli.server`.
"""

from __future__ import annotations

import atexit
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import typing
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

from fastlog import protocol
from fastlog.server.check_processes import die_with_parent

_LISTENING = re.compile(r"listening on PLAINTEXT://([^:\s]+):(\d+)")
_ENDPOINT = re.compile(r"([A-Z0-9_]+)://([^:\s,]+):(\d+)")


class BrokerStartError(AssertionError):
    """The broker did not start (or did not accept connections); the message ends with its
    log's tail. An AssertionError, so a test that hits it fails rather than errors."""


def server_command() -> list[str]:
    """The broker command: $FASTLOG_TEST_SERVER (split on spaces) when set, e.g. to run a
    wrapped or instrumented server, else the installed `fastlog-server` script."""
    custom = os.environ.get("FASTLOG_TEST_SERVER")
    if custom:
        return custom.split()
    script = Path(sys.executable).with_name("fastlog-server")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "fastlog.cli.server"]


class BrokerProcess:
    def __init__(self, data_dir, overrides: dict[str, str] | None = None, port: int = 0,
                 startup_timeout: float = 30.0, limits: dict[str, object] | None = None):
        self.data_dir = Path(data_dir)
        self.overrides = dict(overrides or {})
        # Resource limits the broker runs under, as prlimit(1) options: {"as": bytes} caps
        # its address space, {"nofile": "256:256"} its open files.
        self.limits = dict(limits or {})
        self.port = port
        self.host = "127.0.0.1"
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen | None = None
        # listener name -> bound port (from the ready line), e.g. ports["SASL_PLAINTEXT"]
        self.ports: dict[str, int] = {}
        self.starts = 0
        self.log_path: Path | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        args = [f"--{k}={v}" for k, v in self.limits.items()]
        args = (["prlimit", *args, "--"] if args else []) + server_command()
        props = {"listeners": f"PLAINTEXT://{self.host}:{self.port}",
                 "log.dirs": str(self.data_dir), **self.overrides}
        for k, v in props.items():
            args += ["--override", f"{k}={v}"]
        return args

    def start(self) -> BrokerProcess:
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        # A restart binds the port of the first start again, and while the broker was down
        # any local socket may have taken that port as its ephemeral one (a client
        # reconnecting to it can even connect to itself): such holders are short-lived,
        # so retry the bind for a bounded time instead of failing on the first try.
        deadline = time.monotonic() + self.startup_timeout
        while not self._start_once():
            if time.monotonic() >= deadline:
                self._fail(f"port {self.port} stayed in use")
            time.sleep(0.5)
        return self

    def _start_once(self) -> bool:
        """One start; False only when a restart found its port taken (retried by start)."""
        self.starts += 1
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-broker-{self.starts}.log"
        err = open(self.log_path, "wb")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=err,
                                     stdin=subprocess.DEVNULL, env=env)
        err.close()
        deadline = time.monotonic() + self.startup_timeout
        buf = b""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if not ready:
                continue
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
            m = _LISTENING.search(buf.decode(errors="replace"))
            if m:
                self.port = int(m.group(2))
                line = buf.decode(errors="replace")[m.start():].split("\n", 1)[0]
                self.ports = {n: int(p) for n, _, p in _ENDPOINT.findall(line)}
                if "listeners" in self.overrides:
                    # a restart binds the same ports again
                    self.overrides["listeners"] = ",".join(
                        f"{n}://{h}:{p}" for n, h, p in _ENDPOINT.findall(line))
                self._wait_connectable(deadline)
                return True
        if self.port != 0:
            try:
                self.proc.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            else:
                tail = self.log_tail()
                if f"cannot listen on {self.host}:{self.port}" in tail and "in use" in tail:
                    self.proc.stdout.close()
                    return False
        self._fail(f"broker did not start (stdout: {buf.decode(errors='replace')!r})")

    def _wait_connectable(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            try:
                socket.create_connection((self.host, self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        self._fail("broker printed its port but does not accept connections")

    def _fail(self, why: str) -> typing.NoReturn:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        tail = self.log_tail()
        code = self.proc.returncode if self.proc else None
        raise BrokerStartError(f"{why}; exit code {code}; log tail:\n{tail}")

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except (OSError, AttributeError):
            return "(no log)"

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait: the clean shutdown path. Returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise AssertionError(f"broker ignored SIGTERM for {timeout}s:\n{self.log_tail()}") from None
        finally:
            if self.proc.stdout:
                self.proc.stdout.close()

    def kill(self) -> None:
        """SIGKILL: a crash; nothing after the last write reached the page cache."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.alive():
            try:
                self.stop()
            except AssertionError:
                pass


# ------------------------------------------------------------------ ZooKeeper

ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"
SLF4J_SIMPLE_JAR = "/usr/share/java/slf4j-simple.jar"


def zookeeper_available() -> bool:
    return os.path.exists(ZOOKEEPER_JAR) and shutil.which("java") is not None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
            # if this process dies, the kernel kills the JVM
            start_new_session=True, preexec_fn=die_with_parent,
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


WIRE_TIMEOUT = 10.0


class Wire:
    """One raw connection speaking Kafka framing with fastlog.protocol's encoders."""

    def __init__(self, broker):
        self.sock = socket.create_connection((broker.host, broker.port), timeout=WIRE_TIMEOUT)
        self.cid = 0

    def close(self):
        self.sock.close()

    def send_raw(self, data: bytes):
        self.sock.sendall(data)

    def send(self, api_key, version, body):
        self.cid += 1
        frame = protocol.encode_request(api_key, version, self.cid, "wire-test", body,
                                        framed=True)
        self.sock.sendall(frame)
        return self.cid

    def recv_frame(self) -> bytes | None:
        """One response frame, or None when the broker closed the connection."""
        head = self._recv_exactly(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._recv_exactly(size)

    def _recv_exactly(self, n):
        buf = b""
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            buf += chunk
        return buf

    def call(self, api_key, version, body):
        cid = self.send(api_key, version, body)
        frame = self.recv_frame()
        if frame is None:
            raise AssertionError("broker closed the connection")
        got_cid, resp = protocol.decode_response(api_key, version, frame)
        if got_cid != cid:
            raise AssertionError(f"response to request {got_cid}, expected {cid}")
        return resp

    def closed_by_broker(self) -> bool:
        return self.recv_frame() is None


CONSOLE_START_TIMEOUT_S = 30.0
_CSRF = re.compile(r'name=csrf value="([^"]+)"')


class ConsoleProcess:
    """`fastlog console --port 0 ...` (as `python -m fastlog.cli.main`) and the URL it
    prints; get()/post() speak plain HTTP to it (no redirects followed), csrf() reads the
    token its forms carry. Every wait is bounded."""

    def __init__(self, bootstrap_server: str, *args: str):
        self.cmd = [sys.executable, "-m", "fastlog.cli.main", "console",
                    "--bootstrap-server", bootstrap_server, "--port", "0", *args]
        self.proc: subprocess.Popen | None = None
        self.base = ""

    def start(self) -> ConsoleProcess:
        # stderr to a file: a pipe nobody reads could fill and stall a long-running console
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=self._stderr,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + CONSOLE_START_TIMEOUT_S
        line = b""
        while time.monotonic() < deadline and self.proc.poll() is None:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                line = self.proc.stdout.readline()
                break
        found = re.search(rb"at (http://\S+?)/\s*$", line)
        if not found:
            self.stop()
            self._stderr.seek(0)
            err = self._stderr.read(8192).decode(errors="replace")
            raise AssertionError(f"console did not start: {line!r} {err}")
        self.base = found.group(1).decode()
        return self

    def url(self, path: str = "/", **query) -> str:
        q = urllib.parse.urlencode(query)
        return self.base + path + (f"?{q}" if q else "")

    def get(self, path: str = "/", *, headers: dict | None = None,
            **query) -> tuple[int, str, dict]:
        """(status, body, headers) of a GET, bounded by 30 s."""
        return _open(urllib.request.Request(self.url(path, **query), headers=headers or {}))

    def post(self, path: str, fields: dict) -> tuple[int, str, dict]:
        """(status, body, headers) of a form POST; redirects are not followed."""
        data = urllib.parse.urlencode(fields).encode()
        return _open(urllib.request.Request(self.url(path), data=data, method="POST"))

    def csrf(self) -> str:
        """The per-process token the forms carry (read from the topics page)."""
        _, body, _ = self.get("/topics")
        found = _CSRF.search(body)
        assert found, "no form with a CSRF token on the topics page"
        return found.group(1)

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.terminate()
        try:
            return self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


_opener = urllib.request.build_opener(_NoRedirect)


def _open(request) -> tuple[int, str, dict]:
    try:
        with _opener.open(request, timeout=30) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)
