"""Where the files that every level shares are: site/ (the page, presets.json, the default corpus,
the WebAssembly builds), webgpu/'s runtime files, docs/ and _headers.

Run from a checkout, they are the repository's own files. An installed wheel (`pip install .`)
carries a copy of them, laid out as in the repository, in the data-only package `tinygpt_assets`
beside python_ref (pyproject.toml lists what goes in). Code that needs one of these files starts
from ROOT, never from its own `__file__`, so it works both ways.
"""
from __future__ import annotations

from pathlib import Path

_CODE = Path(__file__).resolve().parents[1]  # the folder holding python_ref/: the checkout or site-packages
_INSTALLED = _CODE / "tinygpt_assets"

ROOT = _INSTALLED if _INSTALLED.is_dir() else _CODE
# The repository when running from one; None from an installed wheel.
CHECKOUT = None if ROOT == _INSTALLED else _CODE


def default_dist() -> Path:
    """Where `build` writes the static site unless told: dist/ of the checkout, else of the working directory."""
    return (CHECKOUT or Path.cwd()) / "dist"
