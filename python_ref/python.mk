# Python: one virtual environment in $(CACHE), reinstalled only when requirements.txt changes.
REQ_STAMP := $(VENV)/.requirements-$(shell sha256sum requirements.txt | cut -c1-16)
SETUP_TARGETS += $(REQ_STAMP)

$(REQ_STAMP):
	@python3 -c 'import venv, ensurepip' 2>/dev/null || \
	  $(call apt_install,python3-venv)
	@test -x $(PY) || python3 -m venv $(VENV)
	@echo "installing Python requirements into $(VENV)"
	@$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt 2>&1 | grep -v "^WARNING: Location" || true
	@$(PY) -c 'import torch, numpy, tqdm, pytest, xdist, hypothesis'
	@rm -f $(VENV)/.requirements-* && touch $@
