# lockstep: every target creates .venv on first use, so one command is all a newcomer needs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench soak docs clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/lockstep demo

# Four workers on two cores: most tests wait on an emulator, an operator or a timer, not on the CPU
# (the suite takes about half the time of one worker).
TEST_WORKERS ?= 4

test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	$(BIN)/lockstep bench

# Chaos soak (a few minutes): ~2,000 pods under API faults and 10 operator SIGKILLs, then two replicas.
soak: $(STAMP)
	$(BIN)/python bench/soak.py

docs: $(STAMP)
	$(BIN)/python scripts/config_reference.py README.md

clean:
	rm -rf $(VENV) build *.egg-info operator/*.egg-info .pytest_cache .mypy_cache .ruff_cache
