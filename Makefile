# fastlog developer commands. The README's Quick start is `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
RUN_STAMP := $(VENV)/.fastlog-run
TEST_STAMP := $(VENV)/.fastlog-test

.PHONY: run test build lint perf clean system-deps venv

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

venv: $(PY)

# Editable install: builds the Cython extensions in place and installs the runtime
# dependencies pinned in pyproject.toml (plus Cython for rebuilds). The test stamp adds
# the test and spark extras (real Kafka clients, PySpark) that `make run` does not need.
$(RUN_STAMP): $(PY) pyproject.toml setup.py
	$(PIP) install -e '.[dev]'
	touch $@

$(TEST_STAMP): $(PY) pyproject.toml setup.py
	$(PIP) install -e '.[test,dev,spark]'
	touch $@ $(RUN_STAMP)

# Rebuild the compiled modules after a .pyx/.pxd change.
build: $(RUN_STAMP)
	$(PY) setup.py -q build_ext --inplace

run: build
	$(VENV)/bin/fastlog-server --override listeners=PLAINTEXT://127.0.0.1:9092 --override log.dirs=./data

# Debian packages some tests drive for real (kcat, ZooKeeper); installed only when missing.
system-deps:
	@bash scripts/install-system-deps.sh

test: $(TEST_STAMP) build system-deps
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

lint: $(RUN_STAMP)
	$(VENV)/bin/ruff check fastlog tests perf
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/cython-lint fastlog

perf: build
	$(PY) perf/run_all.py

clean:
	rm -rf build dist *.egg-info fastlog/*.c fastlog/*.so fastlog/*.html $(VENV)
