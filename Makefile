# DRC build entry points. `make setup` is idempotent: it installs only what is missing.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The Spark driver's class-data archive (drc.spark.cds): sessions start ~3 s faster with it.
CDS := $(VENV)/spark-cds.jsa
SANDBOX_DIR ?= .sandbox
APT_PACKAGES := mariadb-server zookeeper rabbitmq-server default-jre-headless libmariadb-java \
  sysbench openssl \
  systemd prometheus chromium percona-toolkit gcc libc6-dev python3-dev
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup system-packages native test test-unit test-integration test-slow demo demo-down bench lint clean

setup: system-packages $(STAMP) native $(CDS)

# dpkg-query is fast, so this check costs nothing when everything is already installed.
system-packages:
	@missing=""; \
	for pkg in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$pkg 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$pkg"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -q && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	fi

$(STAMP): pyproject.toml
	@[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev,spark]'
	@touch $@

# The compiled hot path (docs/compiled.md): drc.native.build does nothing when its last build is
# complete and made from the sources as they are (it checks their hashes), else builds (~45 s).
native: $(STAMP)
	$(BIN)/python -m drc.native.build --quiet

$(CDS): $(STAMP)
	$(BIN)/python -m drc.spark.cds $@

test: setup
	$(BIN)/pytest --durations=30 tests

test-unit: setup
	$(BIN)/pytest tests/unit

test-integration: setup
	$(BIN)/pytest tests/integration

test-slow: setup
	$(BIN)/pytest -m slow tests

demo: setup
	$(BIN)/drc demo --dir $(SANDBOX_DIR)
	$(BIN)/drc sandbox status --dir $(SANDBOX_DIR)
	@echo "sandbox still running; stop it with: make demo-down"

demo-down: setup
	$(BIN)/drc sandbox down --dir $(SANDBOX_DIR)

bench: setup
	$(BIN)/python bench/run_all.py

lint: setup
	$(BIN)/ruff check drc tests bench
	$(BIN)/ruff format --check drc tests bench
	$(BIN)/mypy drc

clean:
	-[ -x $(BIN)/drc ] && $(BIN)/drc sandbox down --dir $(SANDBOX_DIR)
	rm -rf $(VENV) $(SANDBOX_DIR) .pytest_cache .mypy_cache .ruff_cache .hypothesis drc/native/compiled
