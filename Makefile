# fastlog developer commands. The README's Quick start is `make run` and `make test`.
#   make run [PORT=9092] [HTTP_PORT=9644] [DATA=./data] [ARGS="--override key=value ..."]
PYTHON ?= python3
VENV ?= .venv
PORT ?= 9092
# the HTTP endpoint of `make run`: /metrics, /health/live, /health/ready
HTTP_PORT ?= 9644
DATA ?= ./data
ARGS ?=
# `make test` runs the suite in this many processes (pytest-xdist); PYTEST_ARGS adds options
PYTEST_WORKERS ?= 2
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
RUN_STAMP := $(VENV)/.fastlog-run
TEST_STAMP := $(VENV)/.fastlog-test
# Each setup step prints one line; what the tools print goes here (its tail shown on failure).
BUILD_LOG := $(VENV)/fastlog-build.log
STEP := @bash scripts/step.sh $(BUILD_LOG)

.PHONY: run test build lint perf clean system-deps venv

$(PY):
	$(STEP) "creating the virtual environment $(VENV) (about 10 s)" $(PYTHON) -m venv $(VENV)
	$(STEP) "upgrading pip in $(VENV) (about 10 s)" $(PIP) install --upgrade pip

venv: $(PY)

# Editable install: builds the Cython extensions in place and installs the runtime
# dependencies pinned in pyproject.toml (plus Cython for rebuilds). The test stamp adds
# the test and spark extras (real Kafka clients, PySpark) that `make run` does not need.
$(RUN_STAMP): $(PY) pyproject.toml setup.py
	$(STEP) "installing fastlog and its dependencies into $(VENV) (1-2 minutes, once; log: $(BUILD_LOG))" \
		$(PIP) install -e '.[dev]'
	@touch $@

$(TEST_STAMP): $(PY) pyproject.toml setup.py
	$(STEP) "installing the test and Spark extras into $(VENV) (a few minutes, once; log: $(BUILD_LOG))" \
		$(PIP) install -e '.[test,dev,spark]'
	@touch $@ $(RUN_STAMP)

# Rebuild the compiled modules after a .pyx/.pxd change (only changed modules recompile).
build: $(RUN_STAMP)
	$(STEP) "compiling the Cython modules (about 90 s the first time, seconds after; log: $(BUILD_LOG))" \
		$(PY) setup.py -q build_ext --inplace
	@# the Spark JVM batch reader, when a JDK and pyspark are there (docs/spark.md)
	@if command -v javac >/dev/null 2>&1 && $(PY) -c 'import pyspark' 2>/dev/null; then \
		bash scripts/step.sh $(BUILD_LOG) "building the Spark JVM reader fastlog/spark/jvm/fastlog-spark.jar (about 10 s when changed)" \
			bash scripts/build-spark-jar.sh $(PY); fi

# The broker in the foreground on 127.0.0.1:$(PORT) with its data in $(DATA); Ctrl-C stops it.
run: build
	@echo "starting the broker on 127.0.0.1:$(PORT), data in $(DATA) (make run PORT=... DATA=... ARGS=... to change)"
	@$(PY) -m fastlog.cli.server --override listeners=PLAINTEXT://127.0.0.1:$(PORT) --override http.listener=127.0.0.1:$(HTTP_PORT) --override log.dirs=$(DATA) $(ARGS)

# Debian packages some tests drive for real (kcat, ZooKeeper, a JDK); installed only when missing.
system-deps:
	@bash scripts/install-system-deps.sh

test: $(TEST_STAMP) system-deps build
	$(PY) -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

lint: $(RUN_STAMP)
	$(VENV)/bin/ruff check fastlog tests perf
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/cython-lint fastlog

perf: build
	$(PY) perf/run_all.py

clean:
	rm -rf build dist *.egg-info fastlog/*.c fastlog/*.so fastlog/*.html $(VENV)
