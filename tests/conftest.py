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
