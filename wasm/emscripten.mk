# WebAssembly: the Emscripten toolchain (a Debian trixie root in $(CACHE)/emsdk-trixie, or an
# emcc >= 3.1.60 already on PATH), the five builds in $(BUILD)/wasm/ (copied to site/static/wasm/),
# and what their tests drive: Node (system), Chromium (Debian package) and Python playwright (requirements.txt).
# Every step checks a stamp or a hash first, so on a warm machine this is quiet and instant.
.PHONY: emscripten-setup wasm-test-setup wasm-builds
SETUP_TARGETS += emscripten-setup wasm-test-setup
BUILD_TARGETS += wasm-builds

emscripten-setup:
	@TINYGPT_CACHE=$(CACHE) scripts/setup_emscripten.sh

wasm-test-setup:
	@command -v chromium >/dev/null || { echo "installing chromium (Debian package)"; \
	  $(call apt_install,chromium); }
	@command -v node >/dev/null || { echo "installing nodejs (Debian package)"; \
	  $(call apt_install,nodejs); }

wasm-builds: emscripten-setup
	@TINYGPT_CACHE=$(CACHE) TINYGPT_BUILD=$(BUILD) scripts/build_wasm.sh
