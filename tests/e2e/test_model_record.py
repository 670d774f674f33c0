"""One owner of "the model in this tab" (issue 58): the worker's record of the model is what the status line,
the continue-or-new question and the form show, at the step the model is really at; Stop answers at once
and shows its save; a refused upload is said in plain words beside the upload control; continuing a
float16 file says the optimiser restarts and why."""
from __future__ import annotations

from e2e.page_actions import FINISHED, open_playground, parse, screenshot, start_long_run, status, train
from python_ref import tinygpt_file
from python_ref.config import ModelConfig
from python_ref.model import TinyGPT

# Every change of the status line with its time (performance.now()), from before a click on Stop.
WATCH_STATUS = """() => {
  window.statusLog = [];
  new MutationObserver(() => window.statusLog.push([performance.now(), document.getElementById('status').textContent]))
    .observe(document.getElementById('status'), { childList: true, characterData: true, subtree: true });
}"""
CLICK_STOP = """() => { const t0 = performance.now(); document.getElementById('stop').click();
  return { t0, disabled: document.getElementById('stop').disabled,
           text: document.getElementById('status').textContent }; }"""


def rows(page):
    return page.locator("#checkpoints tbody tr")


def wait_for_row(page, run_id):
    page.wait_for_function(f"document.querySelector(`#checkpoints tbody tr[data-id='{run_id}']`) !== null")
    return page.locator(f"#checkpoints tbody tr[data-id='{run_id}']")


def stop_and_time(page) -> dict:
    """Stop, as a person clicks it: ms until the line says Stopping…, until Stopped, and what it said meanwhile."""
    page.evaluate(WATCH_STATUS)
    click = page.evaluate(CLICK_STOP)
    page.wait_for_function("document.getElementById('status').textContent.startsWith('Stopped')")
    log = page.evaluate("window.statusLog")
    first = next(t for t, text in log if text.startswith("Stopping…"))
    stopped = next(t for t, text in log if text.startswith("Stopped"))
    return {"stopping_ms": first - click["t0"], "stopped_ms": stopped - click["t0"],
            "disabled_at_once": click["disabled"], "said_at_once": click["text"],
            "texts": [text for _, text in log if text.startswith("Stopping")]}


def test_the_dialog_the_form_and_the_status_name_the_real_state(server_url, page, tmp_path):
    open_playground(page, server_url)
    page.fill("#seed", "5")
    start_long_run(page, "tiny")
    page.wait_for_function("window.playground.loaded.step >= 40 && window.playground.lastSaved")
    times = stop_and_time(page)
    stopped = parse(status(page))["step"]
    print(f"\nstopped at step {stopped}: {status(page)}")
    assert page.evaluate("window.playground.loaded.step") == stopped

    # the question names the step it stopped at, not the step it was loaded at (0)
    page.click("#start")
    page.wait_for_selector("#continue-dialog[open]")
    question = page.locator("#continue-text").inner_text()
    print(question)
    assert question.startswith(f"tiny, seed 5 at step {stopped:,} of 100,000 is loaded on WebAssembly.")
    assert f"stays in Saved models at step {stopped:,}" in question
    screenshot(page, "model_record_question_after_stop")
    page.click("#continue-dialog button[value=cancel]")

    # the form follows the model: another preset chosen, then the saved tiny opened again
    run_id = page.evaluate("window.playground.loaded.id")
    page.select_option("#preset", "small")
    assert page.input_value("#steps") == "1500"
    wait_for_row(page, run_id).locator("button[name=open]").click()
    page.wait_for_function(f"document.getElementById('status').textContent.startsWith('Loaded tiny at step {stopped}')")
    print(status(page))
    assert status(page) == f"Loaded tiny at step {stopped} of 100,000 (saved checkpoint)."
    assert page.input_value("#preset") == "tiny" and page.input_value("#steps") == str(100_000 - stopped)
    assert page.input_value("#seed") == "5" and page.input_value("#batch") == "16"

    # a finished model opened again says Loaded, not Finished
    text = train(page, "tiny", 30, seed=6, save_every=1)
    assert text.startswith("Finished: step 30/30"), text
    finished_id = page.evaluate("window.playground.loaded.id")
    page.select_option("#preset", "medium")
    wait_for_row(page, finished_id).locator("button[name=open]").click()
    page.wait_for_function("window.playground.loaded.source === 'saved' && "
                           "document.getElementById('status').textContent.startsWith('Loaded')")
    print(status(page))
    assert status(page) == "Loaded tiny at step 30 (saved checkpoint)."
    assert page.input_value("#preset") == "tiny" and page.input_value("#steps") == "30"
    assert wait_for_row(page, finished_id).locator("button[name=resume]").count() == 0  # nothing left to resume

    # an upload of a shape that is no preset's: the form shows that shape and its parameter count
    config = ModelConfig(nLayer=3, nHead=4, dModel=64, ctx=32)
    model = TinyGPT(config, seed=3)
    path = tmp_path / "odd-shape.tinygpt"
    tinygpt_file.save(path, model, step=40,
                      training={"steps": 40, "batch": 8, "lr": 1e-3, "seed": 3, "weightDecay": 0.05})
    page.set_input_files("#upload", str(path))
    page.wait_for_function("window.playground.loaded?.source === 'upload'")
    option = page.locator("#preset option:checked").inner_text()
    info = page.locator("#preset-info").inner_text()
    print(f"{status(page)}\npreset: {option}\n{info}")
    assert page.input_value("#preset") == "loaded-shape"
    assert "3 layers, 64 wide, 4 heads, context 32" in option
    assert info.startswith(f"{config.param_count():,} parameters")
    assert page.input_value("#batch") == "8" and page.input_value("#lr") == "0.001"
    assert page.input_value("#weight-decay") == "0.05"
    assert status(page) == "Loaded a model at step 40 (uploaded)."
    screenshot(page, "model_record_odd_shape")
    print(f"Stop: 'Stopping…' after {times['stopping_ms']:.0f} ms, 'Stopped' after {times['stopped_ms']:.0f} ms")
    assert page.errors == []


def test_stop_answers_at_once_and_shows_the_save(server_url, page):
    """Stop on a model whose steps take long and whose save is tens of MB: the line changes within 100 ms,
    the button goes off at once, and the save's progress is shown before Stopped."""
    open_playground(page, server_url)
    page.select_option("#backend", "wasm")
    start_long_run(page, "large")
    times = stop_and_time(page)
    print(f"\nlarge on WebAssembly: 'Stopping…' after {times['stopping_ms']:.1f} ms, 'Stopped' after "
          f"{times['stopped_ms']:.0f} ms; said at once: {times['said_at_once']!r}\n" + "\n".join(times["texts"]))
    assert times["stopping_ms"] < 100 and times["disabled_at_once"]
    assert times["said_at_once"].startswith("Stopping…")
    assert any("MB written" in t for t in times["texts"]), times["texts"]  # the save's progress
    screenshot(page, "model_record_stopped_large")
    assert page.errors == []


def test_a_refused_upload_is_said_beside_the_upload_control_and_fp16_says_the_optimiser_restarts(server_url, page,
                                                                                                 tmp_path):
    open_playground(page, server_url)
    train(page, "tiny", 20, seed=8, save_every=1)
    before = status(page)
    bad = tmp_path / "hello.tinygpt"
    bad.write_bytes(b"Hello, this is not a model at all" + bytes(64))
    page.set_input_files("#upload", str(bad))
    page.wait_for_function("document.getElementById('upload-error').textContent !== ''")
    said = page.locator("#upload-error").inner_text()
    print(f"\n{said}")
    assert said == ("hello.tinygpt was not loaded: it is not a TinyGPT model file: a .tinygpt file begins with the "
                    "letters TGPT, and this one does not.")
    assert "b'" not in said and status(page) == before  # the Train status line still speaks of the run
    box = page.locator("#upload-error").bounding_box()
    control = page.locator("label.upload").bounding_box()
    print(f"upload control at y={control['y']:.0f}, its error at y={box['y']:.0f}")
    assert 0 < box["y"] - control["y"] < 120  # right under the control
    screenshot(page, "model_record_upload_refused")

    with page.expect_download() as d:
        page.click("#download-fp16")
    fp16 = tmp_path / "fp16.tinygpt"
    d.value.save_as(fp16)
    assert tinygpt_file.read_state(fp16).header["weightsDtype"] == "float16"
    page.set_input_files("#upload", str(fp16))
    page.wait_for_function("window.playground.loaded?.source === 'upload'")
    assert page.locator("#upload-error").inner_text() == ""
    loaded_notice = page.locator("#notice").inner_text()
    page.fill("#steps", "5")
    page.click("#start")
    page.wait_for_selector("#continue-dialog[open]")
    question = page.locator("#continue-text").inner_text()
    print(f"{loaded_notice}\n{question}")
    assert "restarts the optimiser" in loaded_notice and "restarts the optimiser" in question
    assert "float16" in question and "could not resume the run exactly" in question
    screenshot(page, "model_record_fp16_question")
    page.click("#continue-model")
    page.wait_for_function(FINISHED)
    assert status(page).startswith("Finished: step 25/25"), status(page)
    assert page.errors == []
