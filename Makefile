# lockstep: every target creates .venv on first use, so one command is all a newcomer needs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench soak docs clean constraints

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The versions the image is built from (Dockerfile: pip install -c constraints.txt), pinned as .venv
# resolved them: kept current whenever pyproject.toml changes. The pins are tried first, so a fresh
# machine gets the versions tested; a changed requirement they contradict resolves anew.
constraints.txt: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]' -c constraints.txt \
	  || $(BIN)/python -m pip install --quiet -e '.[test]'
	$(BIN)/python -m pip freeze --exclude-editable | grep -iv '^lockstep[= @]' > constraints.txt

$(STAMP): constraints.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]' -c constraints.txt
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

constraints: constraints.txt

docs: $(STAMP)
	$(BIN)/python scripts/config_reference.py README.md

clean:
	rm -rf $(VENV) build *.egg-info operator/*.egg-info .pytest_cache .mypy_cache .ruff_cache
