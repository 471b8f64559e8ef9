# Every target creates (or reuses) the virtual environment it needs: a fresh machine needs only Python and make.
# What they install is uv.lock (uv's lock of pyproject.toml): a fresh machine installs what was tested.
# `make lock` writes it again after a change to pyproject.toml; `make check-latest` tries today's releases.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The demo's own environment: the wheel of ctxtool and its runtime dependencies only, none of the dev tools
DEMO_VENV ?= .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.installed
# The wheel a user installs, in a venv of its own with the locked runtime dependencies (`make wheel-check`)
WHEEL_VENV ?= .venv-wheel
WHEEL_STAMP := $(WHEEL_VENV)/.installed
# Today's newest releases within pyproject.toml's ranges, no lock (`make check-latest`)
LATEST_VENV ?= .venv-latest
# uv, pinned, in a venv of its own made by the Python that is here (pip installs it from the package index)
UV_VERSION := 0.13.9
TOOLS := .venv-tools
UV := $(TOOLS)/bin/uv
export UV_PYTHON := $(PYTHON)
export UV_PYTHON_DOWNLOADS := never
export UV_NO_PROGRESS := 1
# Byte-compiled at install, as pip does: a run never compiles a dependency (nor does it write .pyc files where
# PYTHONDONTWRITEBYTECODE is set, which some CI images set).
export UV_COMPILE_BYTECODE := 1
PACKAGE_FILES := pyproject.toml setup.py README.md $(shell find ctxtool -type f ! -name '*.so' ! -name '*.pyc')

.PHONY: demo test test-fast test-pure check check-latest lint format typecheck bench rates clean lock wheel \
	wheel-check gemini-cli-fixtures

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

## lock: resolve pyproject.toml's dependencies again into uv.lock (after changing them)
lock: $(UV)
	$(UV) lock

# setup.py builds the optional compiled kernels (ctxtool/_kernels.c) in place: a changed source rebuilds them.
$(STAMP): pyproject.toml setup.py ctxtool/_kernels.c uv.lock | $(UV)
	UV_PROJECT_ENVIRONMENT=$(VENV) $(UV) sync --quiet --locked --extra dev --reinstall-package ctxtool \
		--config-setting editable_mode=compat
	touch $(STAMP)

$(DEMO_STAMP): $(PACKAGE_FILES) uv.lock | $(UV)
	UV_PROJECT_ENVIRONMENT=$(DEMO_VENV) $(UV) sync --quiet --locked --no-editable --reinstall-package ctxtool
	touch $(DEMO_STAMP)

## demo: the main job on the bundled fixtures (no API key, no home directory needed), in .venv-demo
demo: $(DEMO_STAMP)
	$(DEMO_VENV)/bin/ctxtool stats fixtures/
	$(DEMO_VENV)/bin/ctxtool report fixtures/ --output demo-report.html --no-cache
	@echo "HTML report: $(CURDIR)/demo-report.html"

# pytest-xdist: one worker per core, handed one test at a time, so the slow tier (run first, see
# tests/conftest.py) spreads over every worker instead of queueing on the first.
PYTEST_PARALLEL ?= -n auto --maxschedchunk 1

## test: the whole test suite (about 4 minutes on 2 idle cores)
test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL)

## test-fast: every test but the slow tier (the real Gemini CLI and Chromium): the inner loop
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL) -m "not slow"

## test-pure: the fast tier again with the pure-Python functions in place of the compiled kernels (CI runs it)
test-pure: $(STAMP)
	CTXTOOL_PURE=1 $(BIN)/python -m pytest -q $(PYTEST_PARALLEL) -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check ctxtool tests bench

format: $(STAMP)
	$(BIN)/ruff format ctxtool tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

## check: lint + format check + strict types + tests (what CI runs)
check: $(STAMP)
	$(BIN)/ruff check ctxtool tests bench
	$(BIN)/ruff format --check ctxtool tests bench
	$(BIN)/mypy
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL)

## wheel: the sdist and, built from it, the wheel, into dist/ (with the locked setuptools)
wheel: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --no-isolation --outdir dist . > dist.log 2>&1 || { cat dist.log; exit 1; }
	rm -f dist.log

## wheel-check: the wheel installed into a clean venv with the locked runtime dependencies, then the smoke
## suite against that install, run from outside the source tree (CI runs it)
wheel-check: wheel
	rm -rf $(WHEEL_VENV)
	$(UV) venv --quiet $(WHEEL_VENV)
	$(UV) export --quiet --locked --no-dev --no-emit-project --no-hashes -o $(WHEEL_VENV)/constraints.txt
	$(UV) pip install --quiet --python $(WHEEL_VENV)/bin/python -c $(WHEEL_VENV)/constraints.txt dist/*.whl
	touch $(WHEEL_STAMP)
	CTXTOOL_INSTALLED=$(CURDIR)/$(WHEEL_VENV) $(BIN)/python -m pytest -q $(PYTEST_PARALLEL) tests/installed

## check-latest: the tests on the newest releases that pyproject.toml allows, not the lock: run it before
## `make lock`, and weekly, to find a dependency's new release breaking ctxtool before users do
check-latest: | $(UV)
	rm -rf $(LATEST_VENV)
	$(UV) venv --quiet $(LATEST_VENV)
	$(UV) pip install --quiet --python $(LATEST_VENV)/bin/python --upgrade --reinstall-package ctxtool \
		--config-setting editable_mode=compat -e '.[dev]'
	$(UV) pip list --python $(LATEST_VENV)/bin/python | grep -iE '^(msgspec|orjson|polars|typer|rich|genai-prices) '
	$(LATEST_VENV)/bin/python -m pytest -q $(PYTEST_PARALLEL)

## bench: speed and memory of the installed wheel (.venv-wheel, as `make wheel-check` makes it) against an
## orjson floor and the peers measured in the same run, then where the time goes
bench: wheel-check
	$(BIN)/python bench/run.py --write-docs --ctxtool $(CURDIR)/$(WHEEL_VENV)/bin/ctxtool
	$(BIN)/python bench/profile.py
	$(BIN)/python bench/fleet.py --ctxtool $(CURDIR)/$(WHEEL_VENV)/bin/ctxtool

## rates: write the price rates shipped in the package (ctxtool/measure/rates_snapshot.json) from the installed
## genai-prices; run it after upgrading genai-prices (tests/test_rates_snapshot.py says when it is due)
rates: $(STAMP)
	$(BIN)/python bench/rates_snapshot.py

## gemini-cli-fixtures: play the scripted conversations with the pinned Gemini CLI again (needs npm)
gemini-cli-fixtures: $(STAMP)
	$(BIN)/python -m tests.gemini_cli_scenarios

clean:
	rm -rf $(VENV) $(DEMO_VENV) $(WHEEL_VENV) $(LATEST_VENV) $(TOOLS) dist .pytest_cache .mypy_cache .ruff_cache build ctxtool.egg-info ctxtool/_kernels*.so ctxtool/_kernels*.pyd
