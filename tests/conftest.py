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


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    # `make test` runs the suite in two processes (pytest-xdist, --dist loadfile): a test
    # file stays in one process, so its module fixtures start once; so does the Spark
    # folder, whose files share one SparkSession and one broker.
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return "tests/spark" if scope.startswith("tests/spark/") else scope

    return FileScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    # Under xdist the Spark folder, the longest scope, is handed out first, and the other
    # process takes the rest meanwhile.
    if config.getoption("dist", default="no") == "no":   # (also without pytest-xdist)
        return
    items.sort(key=lambda item: not item.nodeid.startswith("tests/spark/"))   # stable
