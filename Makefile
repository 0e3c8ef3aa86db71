# Two targets do all the set-up on a fresh machine: `make serve` and `make test`.
VENV ?= .venv
PYTHON := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: serve build test benchmark

$(STAMP): requirements.txt
	python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs serve

build: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs build --strict

test: $(STAMP)
	$(PYTHON) -m pytest

# Measures the figures docs/performance.md quotes (median of 3 runs; several minutes).
benchmark: $(STAMP)
	$(PYTHON) -m benchmarks --publish
