"""`pip install .` gives a working `tinygpt` anywhere: the wheel carries the page, presets.json, the
default corpus, the WebAssembly builds, the WebGPU runtime, docs/ and _headers, and every command
runs from a directory outside the repository with nothing of the checkout on its import path.

The wheel is built from an sdist, as `python -m build` does: pip unpacks it into a fresh folder, so
no file left in build/ by an earlier build can slip in, and the sdist is checked on the way. It is
installed into a fresh venv that reuses this venv's packages (torch is never downloaded).
"""
import json
import os
import site
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT
from server.app import SITE, webgpu_runtime_files
from server.cli import REQUIRED_BUILDS
from support.server_process import require_site_builds, running_server

ASSETS = "tinygpt_assets"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the tinygpt command of a fresh venv holding only the wheel, the wheel, a working directory
    outside the repository, the environment to run it in)."""
    require_site_builds()  # the wheel carries the builds that are in site/static/wasm
    tmp = tmp_path_factory.mktemp("package")
    dist = tmp / "dist"
    subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
                    "build_meta.build_sdist(sys.argv[1])", str(dist)], cwd=ROOT, check=True, capture_output=True)
    (sdist,) = dist.glob("tinygpt-*.tar.gz")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                    "-w", str(dist), str(sdist)], check=True)
    (wheel,) = dist.glob("tinygpt-*.whl")

    venv = tmp / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (venv_site,) = venv.glob("lib/python*/site-packages")
    # Behind the venv's own site-packages: this venv's torch, starlette, pip... (never the repository).
    (venv_site / "reuse_test_venv.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    python = venv / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", "-q", str(wheel)],
                   check=True)

    work = tmp / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["OMP_NUM_THREADS"] = "1"  # tiny shapes on shared cores
    where = subprocess.run([python, "-c", "import python_ref.resources as r; print(r.ROOT)"], cwd=work, env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where) == venv_site / ASSETS, "the installed tinygpt must read its own copy of the files"
    return venv / "bin" / "tinygpt", wheel, work, env


def test_wheel_carries_the_shared_files(installed):
    _, wheel, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = ["_headers", "site/templates/index.html", "site/static/presets.json",
              "site/static/data/tinyshakespeare.txt"]
    wanted += [f"site/static/wasm/{b}/tinygpt.wasm" for b in REQUIRED_BUILDS]
    wanted += [f"webgpu/{rel}" for rel in webgpu_runtime_files()]
    wanted += [p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")]
    wanted += [p.relative_to(ROOT).as_posix() for p in (SITE / "static" / "js").rglob("*.js")]
    missing = [w for w in wanted if f"{ASSETS}/{w}" not in names]
    assert not missing, f"the wheel lacks {missing}"
    assert not [n for n in names if n.startswith(f"{ASSETS}/webgpu/") and "node_modules" in n]


def test_train_sample_eval_from_anywhere(installed):
    tinygpt, _, work, env = installed

    def run(*argv):
        proc = subprocess.run([tinygpt, *argv], cwd=work, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    # No --corpus: the default corpus comes from the installed package.
    out = run("train", "--preset", "tiny", "--steps", "2", "--eval-every", "0", "--device", "cpu", "--quiet",
              "--out", "model.tinygpt")
    assert "step 2" in out and (work / "model.tinygpt").exists()
    assert run("sample", "model.tinygpt", "--prompt", "ROMEO:", "--max-new-tokens", "8",
               "--device", "cpu").startswith("ROMEO:")
    results = [json.loads(line) for line in run("eval", "model.tinygpt", "--device", "cpu").splitlines()]
    assert results and all(r["loss"] > 0 for r in results)


def test_build_and_serve_from_anywhere(installed):
    tinygpt, _, work, env = installed
    out = work / "dist"
    proc = subprocess.run([tinygpt, "build", "--out", str(out)], cwd=work, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    presets = (SITE / "static" / "presets.json").read_bytes()
    assert "<html" in (out / "index.html").read_text().lower()
    assert (out / "static" / "presets.json").read_bytes() == presets
    assert (out / "webgpu" / "trainer.js").exists() and (out / "_headers").exists()

    with running_server([str(tinygpt), "serve", "--port", "{port}"], cwd=work, env=env) as url:
        with urllib.request.urlopen(url + "/") as r:
            assert "<html" in r.read().decode().lower()
        with urllib.request.urlopen(url + "/static/presets.json") as r:
            assert r.read() == presets
