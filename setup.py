"""Build fastlog's compiled hot paths.

Every ``fastlog/**/*.pyx`` becomes one extension module of the same dotted name.
``FASTLOG_EXTENSIONS=_codec,_index`` limits a development build to some modules;
``FASTLOG_DEBUG=1`` adds line tracing and an annotated HTML report per module.
"""

import os
import sys
from pathlib import Path

from setuptools import Extension, setup

ROOT = Path(__file__).parent


def _extensions():
    from Cython.Build import cythonize

    only = {name.strip() for name in os.environ.get("FASTLOG_EXTENSIONS", "").split(",") if name.strip()}
    debug = os.environ.get("FASTLOG_DEBUG") == "1"
    macros = [("CYTHON_TRACE", "1"), ("FASTLOG_DEBUG", "1")] if debug else []
    exts = []
    for pyx in sorted(ROOT.glob("fastlog/**/*.pyx")):
        rel = pyx.relative_to(ROOT).with_suffix("")
        if only and rel.name not in only:
            continue
        exts.append(
            Extension(
                ".".join(rel.parts),
                [str(pyx.relative_to(ROOT))],
                extra_compile_args=["-O2", "-Wall", "-Wno-unused-function"],
                define_macros=macros,
            )
        )
    directives = {
        "language_level": "3",
        "boundscheck": False,
        "wraparound": False,
        "cdivision": True,
        "embedsignature": True,
    }
    if debug:
        directives["linetrace"] = True
    return cythonize(exts, compiler_directives=directives, annotate=debug, nthreads=0, quiet=True)


if __name__ == "__main__" or "setuptools" in sys.modules:
    setup(ext_modules=_extensions())
