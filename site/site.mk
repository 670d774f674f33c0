# The demo model (docs/demo_model.md) lives in git xz-compressed and outside site/static, so neither
# the static build nor the package carries the compressed copy; the build unpacks it where the page
# fetches it (site/static/models/, ignored).
DEMO_MODEL := site/static/models/demo-large.tinygpt
BUILD_TARGETS += $(DEMO_MODEL)

$(DEMO_MODEL): site/models/demo-large.tinygpt.xz
	@mkdir -p $(@D)
	@python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' $< $@.partial
	@mv $@.partial $@
