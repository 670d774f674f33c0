# WebAssembly: the Emscripten toolchain (a Debian trixie root in $(CACHE)/emsdk-trixie, or an
# emcc >= 3.1.60 already on PATH), the four builds in $(BUILD)/wasm/ (copied to site/static/wasm/),
# and what their tests drive: Node (system), Chromium (Debian package) and Python playwright.
# Every step checks a stamp or a hash first, so on a warm machine this is quiet and instant.
.PHONY: emscripten-setup wasm-test-setup wasm-builds
SETUP_TARGETS += emscripten-setup wasm-test-setup
BUILD_TARGETS += wasm-builds

PLAYWRIGHT_VERSION := 1.65.2
PLAYWRIGHT_STAMP := $(VENV)/.playwright-$(PLAYWRIGHT_VERSION)

emscripten-setup:
	@TINYGPT_CACHE=$(CACHE) wasm/scripts/setup_emscripten.sh

wasm-test-setup: $(PLAYWRIGHT_STAMP)
	@command -v chromium >/dev/null || { echo "installing chromium (Debian package)"; \
	  apt-get install -y -q -o DPkg::Lock::Timeout=600 chromium >/dev/null; }
	@command -v node >/dev/null || { echo "installing nodejs (Debian package)"; \
	  apt-get install -y -q -o DPkg::Lock::Timeout=600 nodejs >/dev/null; }

# The Python driver only; the browser is the Debian chromium above (never `playwright install`).
$(PLAYWRIGHT_STAMP): | $(REQ_STAMP)
	@echo "installing playwright $(PLAYWRIGHT_VERSION) into $(VENV)"
	@$(PY) -m pip install -q --disable-pip-version-check playwright==$(PLAYWRIGHT_VERSION) 2>&1 | grep -v "^WARNING: Location" || true
	@$(PY) -c 'import playwright.sync_api'
	@rm -f $(VENV)/.playwright-* && touch $@

wasm-builds: emscripten-setup
	@TINYGPT_CACHE=$(CACHE) TINYGPT_BUILD=$(BUILD) wasm/scripts/build_wasm.sh
