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

# apt-get install that refreshes the package lists only when a package cannot be found (a fresh
# machine has none; a warm one needs no network round trip).
APT_GET := DEBIAN_FRONTEND=noninteractive apt-get -y -qq -o DPkg::Lock::Timeout=600
apt_install = { $(APT_GET) install $(1) >/dev/null 2>&1 || { $(APT_GET) update >/dev/null && $(APT_GET) install $(1) >/dev/null; }; }

SETUP_TARGETS :=
BUILD_TARGETS :=
include python_ref/python.mk
-include wasm/native.mk wasm/emscripten.mk webgpu/webgpu.mk

.PHONY: setup build serve test

setup: $(SETUP_TARGETS)

build: setup $(BUILD_TARGETS)

HOST ?= 127.0.0.1
PORT ?= 8000

serve: build
	$(PY) -m server serve --host $(HOST) --port $(PORT)

test: build
	$(PY) -m pytest -q tests e2e
