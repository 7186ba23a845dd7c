# The two commands: `make run` and `make test`. Everything else is a helper of theirs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DB_URL ?= $(if $(BC_DATABASE_URL),$(BC_DATABASE_URL),sqlite:///better-compute.db)
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test lint fmt check pytest bench-quick openapi clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(VENV)/.installed $@

run: $(VENV)/.installed
	$(BIN)/better-compute serve --database-url '$(DB_URL)' --host $(HOST) --port $(PORT) --fleet examples/demo-fleet.yaml

test: $(VENV)/.installed-test
	$(MAKE) lint
	$(MAKE) pytest

lint: $(VENV)/.installed-test
	$(BIN)/ruff format --check src tests bench
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy src
	$(BIN)/lint-imports

pytest: $(VENV)/.installed-test
	$(BIN)/pytest

fmt: $(VENV)/.installed-test
	$(BIN)/ruff format src tests bench
	$(BIN)/ruff check --fix src tests bench

bench-quick: $(VENV)/.installed-test
	$(BIN)/python bench/ledger.py --quick

openapi: $(VENV)/.installed
	$(BIN)/python -m better_compute.entrypoints.openapi > openapi.json

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
