# Every target sets itself up: a fresh Debian 12 / Python 3.11 machine needs nothing else.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Two installs: what serving needs (make run), and the extras tests, lint and benchmarks use.
RUN_STAMP := $(VENV)/.run-stamp
STAMP := $(VENV)/.installed-stamp
ENV_ID ?= builtin.Catch-v0
HOST ?= 127.0.0.1
export OPENBLAS_NUM_THREADS := 1

.PHONY: run test bench bench-quick lint fuzz docs clean image

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(RUN_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[test,atari,browser,dmenv,ray,minari,multiagent,mcp,desktop]'
	touch $@ $(RUN_STAMP)

run: $(RUN_STAMP)
	$(VENV)/bin/universe-remote serve $(ENV_ID) --host $(HOST)

test: $(STAMP) lint
	scripts/install-system-packages
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

fuzz: $(STAMP)
	$(PY) -m fuzz

# Says how long each benchmark should take before it runs (all: about 82 minutes on 2
# cores; python -m benchmarks --list has each one's).
bench: $(STAMP)
	$(PY) -m benchmarks

# A short round of the headline benchmarks, one per area (about 3 minutes on a
# 2-core machine): the ratios, fast.
bench-quick: $(STAMP)
	$(PY) -m benchmarks --quick

# The remote's image with podman or Docker, no daemon needed: IMAGE_ARGS=--offline builds
# with no registry (a base from Debian packages, a wheelhouse), --browser the browser
# image; scripts/build-image --help.
IMAGE_ARGS ?=
image: | $(PY)
	$(PY) scripts/build-image $(IMAGE_ARGS)

# The API reference, from the docstrings: build/api/index.html.
docs: $(STAMP)
	$(VENV)/bin/pdoc --docformat restructuredtext -o build/api rewarder vncdriver recordings runtimes envserver remotes

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
