# The two commands: `make run` and `make test`. Everything else is a helper of theirs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DB_URL ?= $(if $(BC_DATABASE_URL),$(BC_DATABASE_URL),sqlite:///better-compute.db)
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: demo-image run test lint fmt check codegen pytest fuzz torture soak bench-quick openapi clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e '.[test]'
	touch $(VENV)/.installed $@

# openapi-python-client, which tests/api/test_generated_client.py runs, in an environment of its own
# (pyproject.toml's `codegen` dependency group): it pins a typer older than the CLI's.
CODEGEN := .venv-codegen

$(CODEGEN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(CODEGEN)
	$(CODEGEN)/bin/python -m pip install --upgrade pip
	$(CODEGEN)/bin/python -m pip install --group codegen
	touch $@

codegen: $(CODEGEN)/.installed

run: $(VENV)/.installed
	$(BIN)/better-compute serve --database-url '$(DB_URL)' --host $(HOST) --port $(PORT) --fleet examples/demo-fleet.yaml

# The demo model server image (busybox-static imported into podman) the walkthroughs run.
demo-image: $(VENV)/.installed
	$(BIN)/python -m better_compute.entrypoints.demo_image

test: $(VENV)/.installed-test
	$(MAKE) lint
	$(MAKE) pytest

lint: $(VENV)/.installed-test
	$(BIN)/ruff format --check src tests bench
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy src tests/typechecks
	$(BIN)/lint-imports

# The suite over every CPU: pytest-xdist starts PYTEST_WORKERS processes (`auto`: one per CPU; 0 runs
# everything in this process), and `--dist loadgroup` sends the `serial` group (races, end-to-end, soak,
# torture and browser tests: tests/conftest.py's SERIAL) to one of them, one test after another, while
# the others share the rest. Coverage is measured where CI runs the suite (`CI=true`, as .ci/run sets)
# or with COVERAGE=1: it takes 2 to 2.7 times the CPU, so a run without it is the quick one; with it,
# the total is checked against the floor in pyproject.toml ([tool.coverage.report] fail_under).
# PYTEST_ARGS go to pytest: `make pytest PYTEST_ARGS='tests/api -k quota'`.
PYTEST_WORKERS ?= auto
COVERAGE ?= $(if $(filter 1 true yes,$(CI)),1,0)
PYTEST_COVERAGE := $(if $(filter 1,$(COVERAGE)),--cov=better_compute --cov-report=term:skip-covered)
PYTEST_ARGS ?=

pytest: $(VENV)/.installed-test $(CODEGEN)/.installed
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_COVERAGE) $(PYTEST_ARGS)

fmt: $(VENV)/.installed-test
	$(BIN)/ruff format src tests bench
	$(BIN)/ruff check --fix src tests bench

# The API fuzz tests at length (tests/reliability/test_fuzz.py; `make test` runs them short): schemathesis
# sends FUZZ_EXAMPLES generated requests per operation and token and FUZZ_SCENARIOS linked scenarios of
# up to FUZZ_STEPS calls, and fails on any 5xx; test_reservation_body_fuzz.py sends 50 x FUZZ_EXAMPLES
# raw bodies to the reservation route. A few minutes; the same counts repeat the same run.
FUZZ_EXAMPLES ?= 500
FUZZ_SCENARIOS ?= 200
FUZZ_STEPS ?= 8

fuzz: $(VENV)/.installed-test
	BC_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) BC_FUZZ_SCENARIOS=$(FUZZ_SCENARIOS) BC_FUZZ_STEPS=$(FUZZ_STEPS) \
		$(BIN)/pytest tests/reliability/test_fuzz.py tests/reliability/test_reservation_body_fuzz.py \
		--timeout=1800 --durations=5

# The MIG torture test at length (tests/torture; `make test` runs it bounded): 3 placers of TORTURE_ATTEMPTS
# reservations each race layout changes (at least TORTURE_CHANGES, and on until the placers are done)
# through the gate and simulated nodes, on
# PostgreSQL ($$BC_TEST_POSTGRES_URL or 127.0.0.1:5432); it prints the counts, the time and any violation.
TORTURE_ATTEMPTS ?= 340000
TORTURE_CHANGES ?= 1000
TORTURE_CHANGE_PAUSE ?= 1.0
# Stop the placers after this many seconds even short of TORTURE_ATTEMPTS (empty: no limit).
TORTURE_SECONDS ?=

torture: $(VENV)/.installed-test
	CI=true TORTURE_ATTEMPTS=$(TORTURE_ATTEMPTS) TORTURE_CHANGES=$(TORTURE_CHANGES) \
		TORTURE_CHANGE_PAUSE=$(TORTURE_CHANGE_PAUSE) TORTURE_SECONDS=$(TORTURE_SECONDS) \
		$(BIN)/pytest tests/torture --timeout=14400 -s

# The PostgreSQL soak at length (tests/soak/soak.py; `make test` runs it bounded, 30 s of load): a real
# `serve` on a database of its own, SOAK_NODES real `bcd` processes (fake NVML, whose MIG state outlives
# the daemon as a GPU's does) killed -9 and started again every SOAK_CHAOS_PAUSE s or so (SOAK_REBOOT_SHARE
# of the restarts reboots: the GPUs come back MIG-off or at a layout other than the pool's), SOAK_PLACERS
# placers booking whole GPUs and MIG instances now and for later (SOAK_PACE s apart), the pool's migLayout
# flipped every SOAK_FLIP_PAUSE s, tenants created and deleted, for SOAK_SECONDS; then, once the nodes
# settle (at most SOAK_SETTLE s), SQL counts overlaps, parent/child overlaps and stranded bookings. On
# $$BC_TEST_POSTGRES_URL or 127.0.0.1:5432. The last line is the JSON summary; the status is 1 if a count
# is not 0. SOAK_SEED picks the run, SOAK_FIRST_LAYOUT the pool's layout at the start (all-disabled),
# SOAK_WORK a directory to keep the server's and the nodes' logs in.
SOAK_SECONDS ?= 600
SOAK_NODES ?= 4
SOAK_PLACERS ?= 2
SOAK_PACE ?= 0.05
SOAK_FLIP_PAUSE ?= 4
SOAK_CHAOS_PAUSE ?= 2
SOAK_REBOOT_SHARE ?= 0.5
SOAK_SETTLE ?= 120
SOAK_SEED ?= 35

soak: $(VENV)/.installed-test
	CI=true SOAK_SECONDS=$(SOAK_SECONDS) SOAK_NODES=$(SOAK_NODES) SOAK_PLACERS=$(SOAK_PLACERS) \
		SOAK_PACE=$(SOAK_PACE) SOAK_FLIP_PAUSE=$(SOAK_FLIP_PAUSE) SOAK_CHAOS_PAUSE=$(SOAK_CHAOS_PAUSE) \
		SOAK_REBOOT_SHARE=$(SOAK_REBOOT_SHARE) SOAK_SETTLE=$(SOAK_SETTLE) SOAK_SEED=$(SOAK_SEED) \
		$(BIN)/python -m tests.soak

bench-quick: $(VENV)/.installed-test
	$(BIN)/python bench/ledger.py --quick

openapi: $(VENV)/.installed
	$(BIN)/python -m better_compute.entrypoints.openapi > openapi.json

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
