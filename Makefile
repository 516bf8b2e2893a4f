# PaddleCloud developer entry points. `make demo` and `make test` do all set-up themselves.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install demo demo-slurm test lint unit e2e bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade "pip>=23.1"
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[dev]"
	touch $@

install: $(VENV)/.installed

demo: install           ## start the platform, run examples/fit_a_line (2 pservers + 2 trainers), stop
	bash scripts/demo.sh

demo-slurm: install     ## the same demo on a private Slurm cluster (scripts/ensure-slurm.sh; root + apt-get)
	bash scripts/demo.sh --backend slurm

lint: install           ## ruff, mypy --strict, import-linter layer contracts
	$(VENV)/bin/ruff check src tests bench examples
	$(VENV)/bin/ruff format --check src tests bench examples
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

unit: install
	$(VENV)/bin/pytest tests/unit -q

e2e: install
	$(VENV)/bin/pytest tests/e2e -q

test: lint              ## everything CI runs (installs PostgreSQL, bubblewrap, Chromium when root + apt-get)
	bash scripts/ensure-system-packages.sh postgresql bubblewrap chromium images
	bash scripts/test.sh

bench: install
	$(PY) bench/submit_latency.py
	$(PY) bench/list_jobs.py

clean:
	rm -rf $(VENV) .demo .pytest_cache .mypy_cache .ruff_cache
