"""`fastlog dump-log` on files it cannot dump: one sentence naming the file once, nothing
on stdout, exit 2."""

import pytest


@pytest.mark.parametrize("name, why", [
    ("garbage.log", "its name is not a base offset (like 00000000000000000000.log)"),
    ("garbage.index", "its name is not a base offset (like 00000000000000000000.index)"),
    ("00000000000000000000.log/", "is a directory"),
])
def test_unreadable_file_is_one_sentence_naming_it_once(fastlog, tmp_path, name, why):
    path = tmp_path / name.rstrip("/")
    if name.endswith("/"):
        path.mkdir()
    else:
        path.write_bytes(b"garbage")
    r = fastlog("dump-log", path)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.splitlines() == [f"fastlog dump-log: cannot read {path}: {why}"]


@pytest.mark.parametrize("name", ["00000000000000000000.log", "missing.timeindex"])
def test_missing_file_is_reported_as_missing(fastlog, tmp_path, name):
    path = tmp_path / name
    r = fastlog("dump-log", path)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        f"fastlog dump-log: cannot read {path}: no such file or directory"]
