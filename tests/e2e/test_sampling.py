"""Sampling as a person meets it: each press of Sample gives new text unless a seed is given, the seed
used is shown after every sample (and one click puts a random one back in the Seed field), a seed gives
the same bytes on WebAssembly, on WebGPU (SwiftShader here) and in `tinygpt sample --seed` on the same
checkpoint, a multi-line prompt keeps its newlines (Ctrl+Enter samples), the sample box keeps its height
and scrolls, and the header names the model and is cleared with the sample when another model comes in."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from e2e.page_actions import ROOT, open_playground, screenshot, train

from python_ref.train import new_run

PROMPT = "ROMEO:\nBut soft, what light\nthrough"  # two newlines a one-line input would lose
TINYGPT = Path(sys.executable).parent / "tinygpt"


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    """tiny, 300 steps of python_ref: it writes words, so two samples differ in what a person reads."""
    run = new_run("tiny", device="cpu", seed=21)
    run.run(300, progress=False)
    path = tmp_path_factory.mktemp("sampling") / "python-tiny.tinygpt"
    run.save(path)
    return path


def cli_sample(path, prompt: str, seed: int, tokens: int, temperature="0.8", top_k="40") -> bytes:
    """What `tinygpt sample` prints (stdout bytes): the prompt, the sampled text, a newline."""
    r = subprocess.run([str(TINYGPT), "sample", str(path), "--prompt", prompt, "--seed", str(seed),
                        "--max-new-tokens", str(tokens), "--temperature", temperature, "--top-k", top_k,
                        "--device", "cpu"], capture_output=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout


def upload(page, path, backend: str):
    page.select_option("#backend", backend)
    page.set_input_files("#upload", str(path))
    page.wait_for_function("window.playground.loaded?.source === 'upload' && "
                           f"window.playground.loaded.backend === '{backend}'")


def sample(page, tokens: int, seed: str = "", keyboard: bool = False) -> dict:
    """Fills Tokens and Seed, samples (the button, or Ctrl+Enter in the prompt), waits for the end; what it shows."""
    page.fill("#max-new", str(tokens))
    page.fill("#sample-seed", seed)
    if keyboard:
        page.focus("#prompt")
        page.keyboard.press("Control+Enter")
    else:
        page.click("#sample-button")
    # the button is off from the press (synchronously) until sampleDone; the stats line is written by then
    page.wait_for_function("!document.getElementById('sample-button').disabled && "
                           "document.getElementById('sample-stats').textContent !== ''")
    return {
        "text": page.locator("#sample-output").inner_text(),
        "bytes": bytes(page.evaluate("window.playground.logits.map((s) => s.token)")),
        "settings": page.locator("#sample-settings").inner_text(),
        "header": page.locator("#sample-model").inner_text(),
        "stats": page.locator("#sample-stats").inner_text(),
    }


def shown_seed(settings: str) -> int:
    m = re.match(r"Seed (\d+)", settings)
    assert m, settings
    return int(m[1])


def test_random_by_default_and_the_shown_seed_gives_the_text_again(server_url, page, model_file):
    open_playground(page, server_url)
    upload(page, model_file, "wasm")
    page.fill("#prompt", "ROMEO:")
    first, second = sample(page, 120), sample(page, 120)
    print(f"\nfirst:  {first['settings']}\n{first['text']!r}\nsecond: {second['settings']}\n{second['text']!r}")
    assert first["text"] != second["text"], "two presses with an empty Seed gave the same text"
    assert "(picked at random)" in first["settings"] and "(picked at random)" in second["settings"]
    assert shown_seed(first["settings"]) != shown_seed(second["settings"])
    assert page.locator("#reuse-seed").is_visible()
    page.click("#reuse-seed")  # the random seed of the second sample back in the field
    assert page.input_value("#sample-seed") == str(shown_seed(second["settings"]))
    assert page.evaluate("document.activeElement.id") == "sample-seed"
    again = sample(page, 120, seed=page.input_value("#sample-seed"))
    print(f"again:  {again['settings']}\n{again['text']!r}")
    assert again["text"] == second["text"] and again["bytes"] == second["bytes"]
    assert "(picked at random)" not in again["settings"] and not page.locator("#reuse-seed").is_visible()
    page.locator("#sample").scroll_into_view_if_needed()
    screenshot(page, "sampling_seed_reused")
    assert page.errors == []


@pytest.mark.parametrize("backend,tokens", [("wasm", 200), ("webgpu", 48)])  # SwiftShader: a few dozen tokens
def test_a_seed_gives_the_clis_bytes_on_each_engine(server_url, page, model_file, backend, tokens):
    seed = 424242
    want = cli_sample(model_file, PROMPT, seed, tokens)
    open_playground(page, server_url)
    upload(page, model_file, backend)
    page.fill("#prompt", PROMPT)  # a textarea: its newlines are kept
    got = sample(page, tokens, seed=str(seed), keyboard=True)  # Ctrl+Enter in the prompt samples
    print(f"\n{backend}: {got['header']} {got['settings']} {got['stats']}\npage: {got['text']!r}\n"
          f"tinygpt sample --seed {seed}: {want.decode(errors='replace')!r}")
    assert got["text"].startswith(PROMPT), "the prompt's newlines were lost"
    assert got["settings"].startswith(f"Seed {seed} · temperature 0.8 · top-k 40")
    # byte for byte: the CLI prints the prompt, the sampled bytes (UTF-8, invalid bytes replaced) and a newline
    assert len(got["bytes"]) == tokens
    assert want == (PROMPT.encode() + got["bytes"]).decode("utf-8", errors="replace").encode() + b"\n"
    if got["bytes"].isascii():  # what the page shows is those bytes (non-ASCII bytes would be shown as escapes)
        assert got["text"] == PROMPT + got["bytes"].decode()
    screenshot(page, f"sampling_seed_{backend}")
    assert page.errors == []


def test_a_long_sample_scrolls_in_its_own_box(server_url, page, model_file):
    open_playground(page, server_url)
    upload(page, model_file, "wasm")
    sample(page, 1500, seed="7")  # past the box's height and the logit view's 1,000 chips
    before = page.evaluate("document.documentElement.scrollHeight")
    got = sample(page, 6000, seed="7")
    box = page.evaluate("""(() => { const e = document.getElementById('sample-output');
      return {client: e.clientHeight, scroll: e.scrollHeight, top: e.scrollTop,
              page: document.documentElement.scrollHeight, overflow: getComputedStyle(e).overflowY,
              tabindex: e.tabIndex}; })()""")
    print(f"\n6,000 tokens ({len(got['text']):,} characters): the box is {box['client']} px tall showing "
          f"{box['scroll']:,} px of text, scrolled to {box['top']:,}; the page is {box['page']:,} px tall, "
          f"{before:,} px after a 1,500-token sample")
    assert box["client"] <= 400 and box["scroll"] > 5 * box["client"] and box["overflow"] == "auto"
    assert box["top"] + box["client"] >= box["scroll"] - 2, "the end of a streaming sample stays in view"
    assert abs(box["page"] - before) <= 2, "the page grew with the sample's length"
    assert box["tabindex"] == 0  # a keyboard reaches it and scrolls it
    page.focus("#sample-output")
    page.keyboard.press("Home")  # keyboard scrolling is animated: it reaches the top within a moment
    page.wait_for_function("document.getElementById('sample-output').scrollTop === 0", timeout=5000)
    page.locator("#sample").scroll_into_view_if_needed()
    screenshot(page, "sampling_long_sample_scrolls")
    assert page.errors == []


def test_an_untrained_models_long_sample_leaves_the_page_responsive(server_url, page, tmp_path):
    """An untrained model samples random bytes, most of them shown as escapes (an element each). Laid out as
    one paragraph, each append relaid the whole sample: at 100,000 bytes 118 ms an append, and a click on
    Stop waited 30 s for the sample to end. The page lays it out in runs (sample_text.js); this checks that
    the runs stay short and that they show, and read, exactly the text of one paragraph."""
    path = tmp_path / "untrained.tinygpt"
    new_run("tiny", device="cpu", seed=5).save(path)
    open_playground(page, server_url)
    upload(page, path, "wasm")
    page.fill("#temperature", "1")
    page.fill("#top-k", "0")
    page.evaluate("""() => {
      window.jank = { longest: 0, total: 0 };
      new PerformanceObserver((list) => {
        for (const e of list.getEntries()) {
          window.jank.longest = Math.max(window.jank.longest, e.duration);
          window.jank.total += e.duration;
        }
      }).observe({ type: 'longtask' });
    }""")
    got = sample(page, 30_000, seed="1")
    shown = page.evaluate("""async () => {
      const { renderBytes, RUN_CHARS } = await import('./static/js/sample_text.js');
      const e = document.getElementById('sample-output'), s = window.playground.sample;
      const bytes = [...new TextEncoder().encode(s.prompt), ...window.playground.logits.map((x) => x.token)];
      const expected = renderBytes(Uint8Array.from(bytes), true).pieces.map((p) => p.text ?? p.escape).join('');
      // the same text as one paragraph, in a box of the same width: the height the runs must match
      const one = document.createElement('pre');
      one.style.cssText = `width: ${getComputedStyle(e).width}; box-sizing: ${getComputedStyle(e).boxSizing}`;
      one.append(...[...e.cloneNode(true).children].flatMap((run) => [...run.childNodes]));
      e.after(one);
      const heights = [e.scrollHeight, one.scrollHeight];
      one.remove();
      const runs = [...e.children];
      return { expected, inner: e.innerText, content: e.textContent, heights, runChars: RUN_CHARS,
               runs: runs.length, allRuns: runs.every((r) => r.className === 'sample-run'),
               longestRun: Math.max(...runs.map((r) => r.textContent.length)),
               escapes: e.querySelectorAll('.escape').length,
               unended: runs.slice(0, -1).filter((r) => !r.textContent.endsWith('\\n')).length };
    }""")
    jank = page.evaluate("window.jank")
    print(f"\n30,000 untrained tokens: {len(shown['content']):,} characters, {shown['escapes']:,} escapes, in "
          f"{shown['runs']} runs (longest {shown['longestRun']:,} characters); heights {shown['heights']} px; "
          f"long tasks {jank['total']:.0f} ms in all, the longest {jank['longest']:.0f} ms; {got['stats']}")
    assert shown["escapes"] > 10_000  # random bytes: the case that froze the page
    assert shown["inner"] == shown["content"] == shown["expected"]
    assert shown["allRuns"] and shown["unended"] == 0 and shown["runs"] > 10
    # a run ends at a newline once it holds RUN_CHARS characters (the longest waits for a newline)
    assert len(shown["content"]) / shown["runs"] < 2 * shown["runChars"]
    assert shown["heights"][0] == shown["heights"][1]
    page.locator("#sample").scroll_into_view_if_needed()
    screenshot(page, "sampling_untrained_long_sample")
    assert page.errors == []


def test_the_header_names_the_model_and_clears_when_another_comes_in(server_url, page, model_file):
    open_playground(page, server_url)
    train(page, "tiny", 10)
    page.fill("#prompt", "ROMEO:")
    got = sample(page, 40, seed="3")
    page.click("#attention-button")
    page.wait_for_function("window.playground.attention?.T > 0")
    print(f"\nafter training: {got['header']!r} {got['settings']!r}")
    assert got["header"] == "From tiny at step 10 (trained here), on WebAssembly."
    assert page.locator("#attention-canvas").is_visible()
    screenshot(page, "sampling_header_before_switch")

    upload(page, model_file, "wasm")  # another model: the old sample and heatmap are not its
    shown = page.evaluate("""(() => Object.fromEntries(['sample-output', 'sample-model', 'sample-settings',
      'sample-stats', 'logit-tokens', 'attention-info', 'attention-cell']
      .map((id) => [id, document.getElementById(id).textContent])))()""")
    print(f"after the upload: {shown}; heatmap visible {page.locator('#attention-canvas').is_visible()}")
    assert all(text == "" for text in shown.values()), shown
    assert not page.locator("#attention-canvas").is_visible()
    got = sample(page, 40, seed="3")
    print(f"after sampling it: {got['header']!r}")
    assert got["header"] == "From tiny at step 300 (uploaded), on WebAssembly."
    screenshot(page, "sampling_header_after_switch")
    assert page.errors == []
