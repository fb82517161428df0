VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: serve test lint

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/titen serve

test: $(STAMP)
	$(VENV)/bin/pytest -q

# ruff, then mypy over the package ([tool.mypy] in pyproject.toml; docs/tooling.md).
lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check . && $(VENV)/bin/mypy
