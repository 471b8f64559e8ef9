# Every target creates (or reuses) the virtual environment it needs: a fresh machine needs only Python and make.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The demo's own environment: ctxtool and its runtime dependencies only, none of the dev tools of `make check`
DEMO_VENV ?= .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.installed

.PHONY: demo test test-fast test-pure check lint format typecheck bench rates clean gemini-cli-fixtures

# setup.py builds the optional compiled kernels (ctxtool/_kernels.c) in place: a changed source rebuilds them.
$(STAMP): pyproject.toml setup.py ctxtool/_kernels.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]' --config-settings editable_mode=compat
	touch $(STAMP)

$(DEMO_STAMP): pyproject.toml setup.py ctxtool/_kernels.c
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e . --config-settings editable_mode=compat
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

## bench: speed and memory against an orjson floor measured in the same run, then where the time goes
bench: $(STAMP)
	$(BIN)/python bench/run.py --write-readme
	$(BIN)/python bench/profile.py

## rates: write the price rates shipped in the package (ctxtool/measure/rates_snapshot.json) from the installed
## genai-prices; run it after upgrading genai-prices (tests/test_rates_snapshot.py says when it is due)
rates: $(STAMP)
	$(BIN)/python bench/rates_snapshot.py

## gemini-cli-fixtures: play the scripted conversations with the pinned Gemini CLI again (needs npm)
gemini-cli-fixtures: $(STAMP)
	$(BIN)/python -m tests.gemini_cli_scenarios

clean:
	rm -rf $(VENV) $(DEMO_VENV) .pytest_cache .mypy_cache .ruff_cache build ctxtool.egg-info ctxtool/_kernels*.so ctxtool/_kernels*.pyd
