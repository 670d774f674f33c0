# Python: one virtual environment in $(CACHE), reinstalled only when requirements.txt changes, with this
# checkout installed into it editable (no dependencies, no build isolation: nothing is downloaded), so that
# `tinygpt` and its entry points (serve, build and bench join the command that way) work from the venv.
REQ_STAMP := $(VENV)/.requirements-$(shell sha256sum requirements.txt | cut -c1-16)
EDITABLE_STAMP := $(VENV)/.editable-$(shell echo $(CURDIR) | cat - pyproject.toml | sha256sum | cut -c1-16)
SETUP_TARGETS += $(REQ_STAMP) $(EDITABLE_STAMP)

$(REQ_STAMP):
	@python3 -c 'import venv, ensurepip' 2>/dev/null || \
	  $(call apt_install,python3-venv)
	@test -x $(PY) || python3 -m venv $(VENV)
	@echo "installing Python requirements into $(VENV)"
	@$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt 2>&1 | grep -v "^WARNING: Location" || true
	@$(PY) -c 'import torch, numpy, tqdm, pytest, xdist, hypothesis'
	@rm -f $(VENV)/.requirements-* && touch $@

$(EDITABLE_STAMP): $(REQ_STAMP)
	@echo "installing this checkout into $(VENV) (editable)"
	@$(PY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e . 2>&1 | grep -v "^WARNING: Location" || true
	@$(VENV)/bin/tinygpt --help >/dev/null
	@rm -f $(VENV)/.editable-* && touch $@
