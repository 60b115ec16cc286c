"""`fastlog console` on the command line: a cluster that does not answer, a bad
--metrics-url or port is one sentence and a non-zero exit, never a traceback; `fastlog
--help` lists the command."""


def test_unreachable_cluster_is_one_sentence(fastlog, closed_port):
    r = fastlog("console", "--bootstrap-server", f"127.0.0.1:{closed_port}", "--port", "0")
    assert r.returncode == 1
    assert r.stderr.startswith("fastlog console: ") and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr


def test_bad_options_are_one_sentence(fastlog, closed_port):
    r = fastlog("console", "--metrics-url", "ftp://x/metrics")
    assert r.returncode == 2
    assert r.stderr == ("fastlog console: --metrics-url must be an http:// or https:// URL, "
                        "not 'ftp://x/metrics'\n")
    r = fastlog("console", "--port", "70000")
    assert r.returncode == 2 and "'70000' is not a port number" in r.stderr
    r = fastlog("--help")
    assert "console" in r.stdout + r.stderr


def test_port_in_use_is_one_sentence(fastlog, bootstrap):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = fastlog("console", "--bootstrap-server", bootstrap, "--port", str(port))
    assert r.returncode == 2
    assert r.stderr.startswith(f"fastlog console: cannot listen on 127.0.0.1:{port}: ")
