# WebGPU: the tests drive headless Debian chromium (WebGPU on its SwiftShader adapter, through
# Python playwright from requirements.txt) and Node with the npm `webgpu` package (Dawn)
# on SwiftShader's Vulkan ICD from the same chromium package: software adapters, correctness only.
# The npm package is installed once into $(CACHE), keyed by the lockfile's hash, and linked as
# webgpu/node_modules so fresh clones reuse it.
WEBGPU_LOCK_HASH := $(shell sha256sum webgpu/package-lock.json | cut -c1-16)
WEBGPU_NODE_DIR := $(CACHE)/node/webgpu-$(WEBGPU_LOCK_HASH)
WEBGPU_STAMP := $(WEBGPU_NODE_DIR)/.installed
SWIFTSHADER_ICD := /usr/lib/chromium/vk_swiftshader_icd.json
SETUP_TARGETS += $(SWIFTSHADER_ICD) vulkan-loader $(WEBGPU_STAMP) webgpu-node-modules

$(SWIFTSHADER_ICD):
	@echo "installing chromium (its SwiftShader Vulkan driver runs the WebGPU tests)"
	@$(call apt_install,chromium)
	@test -f $@ || (echo "chromium did not provide $@" >&2; exit 1)

# Dawn in Node opens the system's Vulkan loader (chromium keeps its own copy private); Debian's
# chromium does not depend on libvulkan1, so a fresh machine may lack it.
.PHONY: vulkan-loader
vulkan-loader:
	@ldconfig -p | grep -q 'libvulkan\.so\.1 ' || { echo "installing libvulkan1 (the Vulkan loader that Dawn opens)"; \
	  $(call apt_install,libvulkan1); }

# keyed by the lockfile's hash: no file prerequisites, so a fresh clone's new mtimes reinstall nothing
$(WEBGPU_STAMP):
	@command -v node >/dev/null || $(call apt_install,nodejs npm)
	@echo "installing the npm webgpu package into $(WEBGPU_NODE_DIR)"
	@mkdir -p $(WEBGPU_NODE_DIR) && cp webgpu/package.json webgpu/package-lock.json $(WEBGPU_NODE_DIR)/
	@cd $(WEBGPU_NODE_DIR) && npm ci --silent --no-audit --no-fund --ignore-scripts 2>&1 | grep -v 'Unknown user config' || true
	@test -f $(WEBGPU_NODE_DIR)/node_modules/webgpu/index.js && touch $@

.PHONY: webgpu-node-modules
webgpu-node-modules: $(WEBGPU_STAMP)
	@test "$$(readlink webgpu/node_modules)" = "$(WEBGPU_NODE_DIR)/node_modules" || ln -sfn $(WEBGPU_NODE_DIR)/node_modules webgpu/node_modules
