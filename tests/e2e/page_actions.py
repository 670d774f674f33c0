"""What a person does in the playground, as functions the e2e tests share: fill the training form,
press Train (answering the continue-or-new question), wait for the run, read what the page shows,
and save a screenshot of the final state for a human to look at."""
from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = Path(os.environ.get("TINYGPT_BUILD", ROOT / "build")) / "e2e-screenshots"

# How long a page test waits for anything before calling the page hung: CI's 2-core box has run 2.5×
# slower on some days than on others, and two test processes share its cores (the Makefile's pytest-xdist)
PAGE_WAIT_MS = 300_000

FINISHED = "() => /^(Finished|Stopped|Error|That )/.test(document.getElementById('status').textContent)"


def status(page) -> str:
    return page.locator("#status").inner_text()


def open_playground(page, url: str) -> None:
    page.goto(url)
    page.wait_for_function("document.querySelectorAll('#features li').length >= 6")


def fill_training(page, preset: str, steps: int, backend: str = "wasm", seed: int | None = None,
                  save_every: float | None = None) -> None:
    page.select_option("#preset", preset)
    page.select_option("#backend", backend)
    page.fill("#steps", str(steps))
    if seed is not None:
        page.fill("#seed", str(seed))
    if save_every is not None:
        page.fill("#checkpoint-seconds", str(save_every))


def press_train(page, answer: str = "new") -> None:
    """Train; if a model is loaded the page asks 'continue or new', answered with `answer`."""
    # Read before the click: a new run's own model can be loaded before a read after the click returns,
    # and then no question comes (seen with two test processes sharing two cores).
    asks = page.evaluate("window.playground.loaded !== null")
    page.click("#start")
    if asks:
        page.wait_for_selector("#continue-dialog[open]")
        page.click("#continue-model" if answer == "continue" else "#new-model")


def train(page, preset: str, steps: int, backend: str = "wasm", seed: int | None = None, save_every=None) -> str:
    fill_training(page, preset, steps, backend, seed, save_every)
    ended = page.evaluate("window.playground.runsEnded")
    press_train(page)
    page.wait_for_function(f"window.playground.runsEnded > {ended}")
    return status(page)


def start_long_run(page, preset: str = "tiny") -> None:
    """Starts a run far too long to finish during a test and waits for its first step."""
    page.select_option("#preset", preset)
    page.fill("#steps", "100000")
    page.click("#start")
    page.wait_for_function("/^step [1-9]/.test(document.getElementById('status').textContent)")


def losses(page) -> list:
    """Every training loss the page received, indexed by step (index 0 is None)."""
    return page.evaluate("Array.from(window.playground.losses, (x) => x ?? null)")


def parse(text: str) -> dict:
    m = re.search(r"step (\d+)/(\d+) · loss ([\d.]+)(?: · validation ([\d.]+))?"
                  r"(?: · ([\d,]+) tokens/s · ([\d.]+) ms/step)?", text)
    assert m, text
    return {"step": int(m[1]), "steps": int(m[2]), "loss": float(m[3]), "val": float(m[4]) if m[4] else None,
            "tokens_per_s": int(m[5].replace(",", "")) if m[5] else None, "ms": float(m[6]) if m[6] else None}


def screenshot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


FUNCTION = re.compile(r"^\s*(async\b|function\b|\(?[\w\s,{}]*\)?\s*=>)")


def watched(p):
    """A page as the tests use it: page errors and Content-Security-Policy violations recorded (Chromium
    reports each violation in the console, a page's or a worker's), the default wait, and
    wait_for_function given a function: with an expression string, Playwright polls it through eval(),
    which the page's policy (no 'unsafe-eval') refuses, so an expression is wrapped as `() => (expr)`."""
    p.errors = []
    p.on("pageerror", lambda e: p.errors.append(str(e)))
    p.csp_violations = []
    p.on("console", lambda m: p.csp_violations.append(m.text) if "Content Security Policy" in m.text else None)
    p.set_default_timeout(PAGE_WAIT_MS)
    wait = p.wait_for_function
    p.wait_for_function = lambda expression, *a, **k: wait(
        expression if FUNCTION.match(expression) else f"() => ({expression})", *a, **k)
    return p
