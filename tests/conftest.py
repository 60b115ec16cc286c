"""Suite-wide guards and fixtures.

fastlog has no pure-Python twin of its compiled modules, so a test can only ever exercise
the compiled code; this guard makes sure no stray ``.py`` of the same name shadows a
``.so`` (which would make every result meaningless). A module that is not built at all
fails in the tests that import it, with the import error.
"""

import importlib
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def pytest_sessionstart(session):
    for pyx in sorted((ROOT / "fastlog").glob("**/*.pyx")):
        name = ".".join(pyx.relative_to(ROOT).with_suffix("").parts)
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if not str(module.__file__).endswith(".so"):
            raise pytest.UsageError(f"{name} is not compiled ({module.__file__}); run 'make build'")


def pytest_collection_modifyitems(config, items):
    # `make test` runs the suite in two processes (pytest-xdist, --dist loadgroup). A test
    # file stays in one process, so its module fixtures start once; so does the Spark
    # folder, whose files share one SparkSession and one broker. That folder is the longest
    # group, so it is handed out first and the other process takes the rest meanwhile.
    if not config.pluginmanager.hasplugin("xdist"):
        return
    groups = {}
    for item in items:
        path = pathlib.Path(str(item.fspath)).resolve().relative_to(ROOT)
        groups[item.nodeid] = "spark" if path.parts[:2] == ("tests", "spark") else path.as_posix()
        item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))
    items.sort(key=lambda item: groups[item.nodeid] != "spark")   # stable: order kept
