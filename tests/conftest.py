"""Suite-wide guards and fixtures.

The compiled modules must be the ones under test: an import that silently fell back to
something else would make every result meaningless, so the session refuses to start.
"""

import importlib
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def pytest_sessionstart(session):
    for pyx in sorted((ROOT / "fastlog").glob("**/*.pyx")):
        name = ".".join(pyx.relative_to(ROOT).with_suffix("").parts)
        module = importlib.import_module(name)
        if not str(module.__file__).endswith(".so"):
            raise pytest.UsageError(f"{name} is not compiled ({module.__file__}); run 'make build'")
