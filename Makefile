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
include python_ref/python.mk site/site.mk
-include wasm/native.mk wasm/emscripten.mk webgpu/webgpu.mk

.PHONY: setup build serve test test-fast lint

setup: $(SETUP_TARGETS)

build: setup $(BUILD_TARGETS)

HOST ?= 127.0.0.1
PORT ?= 8000

serve: build
	$(VENV)/bin/tinygpt serve --host $(HOST) --port $(PORT)

# One pytest process per core, at most 2 (pytest-xdist), each taking whole modules (their browser or
# Node fixtures are made once). Run alone, the suite kept one of CI's 2 cores idle a third of the time:
# SwiftShader compiles each WGSL pipeline on one thread, in Chromium as in Node. On the 2-core box:
# 17 min 35 s in one process, 12 min 12 s in two (docs/lab/2026-11-26-wgsl-step-subgroups.md §22). The multi-process gloo
# runs (marker `alone`) come after, in one process: beside another test process a rank sometimes aborted.
test: build lint
	$(PY) -m pytest -q -n auto --maxprocesses 2 --dist loadfile --durations=30 -m "not alone" tests
	$(PY) -m pytest -q --durations=5 -m alone tests

# The edit loop: Python, the native C++ core, the WebAssembly builds and the page's JS in Node, the server
# and the benchmarks' own logic; no Chromium, no SwiftShader, no multi-process training (markers in
# pyproject.toml; tests/conftest.py marks tests/e2e and tests/webgpu). About 3 minutes on the 2-core box.
FAST_LANE := -m "not browser and not swiftshader and not alone"
test-fast: build
	$(PY) -m pytest -q -n auto --maxprocesses 2 --dist loadfile --durations=10 $(FAST_LANE) tests

# Linters: ruff (Python, pyproject.toml), clang-format (C++, .clang-format), ESLint (JavaScript,
# eslint.config.js). ESLint comes from npm into $(CACHE), keyed by the lockfile, like webgpu's package.
LINT_NODE_DIR := $(CACHE)/node/lint-$(shell sha256sum package-lock.json | cut -c1-16)
CXX_SOURCES = $(shell git ls-files 'wasm/*.cpp' 'wasm/*.h' 'bench/*.cpp' 2>/dev/null || find wasm bench -name '*.cpp' -o -name '*.h')
JS_SOURCES = $(shell git ls-files '*.js' '*.mjs' 2>/dev/null || find site webgpu bench tests -name '*.js' -o -name '*.mjs')

$(LINT_NODE_DIR)/.installed:
	@command -v node >/dev/null || $(call apt_install,nodejs npm)
	@echo "installing ESLint into $(LINT_NODE_DIR)"
	@mkdir -p $(LINT_NODE_DIR) && cp package.json package-lock.json $(LINT_NODE_DIR)/
	@cd $(LINT_NODE_DIR) && npm ci --silent --no-audit --no-fund --ignore-scripts 2>&1 | grep -v 'Unknown user config' || true
	@test -x $(LINT_NODE_DIR)/node_modules/.bin/eslint && touch $@

.PHONY: lint-setup
lint-setup: $(REQ_STAMP) $(LINT_NODE_DIR)/.installed
	@command -v clang-format >/dev/null || { echo "installing clang-format"; $(call apt_install,clang-format); }
	@[ "$$(readlink node_modules)" = "$(LINT_NODE_DIR)/node_modules" ] || ln -sfn $(LINT_NODE_DIR)/node_modules node_modules

lint: lint-setup
	@$(VENV)/bin/ruff check --quiet .
	@clang-format --dry-run --Werror $(CXX_SOURCES)
	@node_modules/.bin/eslint --max-warnings 0 $(JS_SOURCES)
	@echo "lint: ruff, clang-format and eslint found nothing"
