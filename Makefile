# Two targets do all the set-up on a fresh machine: `make serve` and `make test`.
VENV ?= .venv
PYTHON := $(VENV)/bin/python
STAMP := $(VENV)/.installed
MKDOCS := NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs
# Where the site will be published (canonical links, sitemaps, hreflang); the Chinese edition
# is always under zh/. `make serve` serves the built site at this address.
PORT ?= 8000
SITE_URL ?= http://127.0.0.1:$(PORT)/
SITE_URL_ZH ?= $(SITE_URL)zh/
export SITE_URL SITE_URL_ZH

.PHONY: serve serve-en serve-zh build test benchmark

$(STAMP): requirements.txt
	python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

# Both editions, built, served as they will be published: English at /, Chinese at /zh/.
serve: build
	$(PYTHON) -m http.server --bind 127.0.0.1 --directory site $(PORT)

# One edition with live reload while you write (the other edition's links are not served).
serve-en: $(STAMP)
	$(MKDOCS) serve -a 127.0.0.1:$(PORT)

serve-zh: $(STAMP)
	$(MKDOCS) serve -f mkdocs.zh.yml -a 127.0.0.1:$(PORT)

# The English edition first: its build cleans site/, the Chinese one writes site/zh/.
build: $(STAMP)
	$(MKDOCS) build --strict
	$(MKDOCS) build --strict -f mkdocs.zh.yml

test: $(STAMP)
	$(PYTHON) -m pytest

# Measures the figures docs/performance.md and docs/activations.md quote (median of 3 runs; the
# planner's accuracy on real architectures takes about two hours the first time, then its cache).
benchmark: $(STAMP)
	$(PYTHON) -m benchmarks --publish
	$(PYTHON) -m benchmarks.model_planner --time-decide
	$(PYTHON) -m benchmarks.activations
	$(PYTHON) -m benchmarks.pool_edge
