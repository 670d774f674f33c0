# The two commands of the README: `make serve` and `make test`. Both install what is missing first;
# on a warm machine set-up is a few quiet checks. Toolchains and caches live in $(CACHE), outside
# the repo, so fresh clones and CI reuse them. Each part of the project adds its own set-up, build
# and test prerequisites from its own .mk file.
SHELL := /bin/bash
CACHE ?= $(HOME)/.cache/tinygpt
VENV := $(CACHE)/venv
PY := $(VENV)/bin/python
BUILD := $(CURDIR)/build
export PYTHONPATH := $(CURDIR)
export TINYGPT_BUILD := $(BUILD)

SETUP_TARGETS :=
BUILD_TARGETS :=
include python_ref/python.mk
-include wasm/native.mk wasm/emscripten.mk webgpu/webgpu.mk

.PHONY: setup build serve test

setup: $(SETUP_TARGETS)

build: setup $(BUILD_TARGETS)

serve: build
	$(PY) -m python_ref.cli train --preset tiny --steps 200 --out $(CACHE)/serve-demo.tinygpt
	$(PY) -m python_ref.cli sample $(CACHE)/serve-demo.tinygpt --prompt "ROMEO:" --max-new-tokens 200

test: build
	$(PY) -m pytest -q tests
