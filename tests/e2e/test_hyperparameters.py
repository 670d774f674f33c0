"""Learning rate, batch, warm-up, schedule and weight decay as fields of the Train form (issue 58): their
defaults are presets.json's, bad values are refused like the other fields, a page run with warm-up and a
cosine schedule follows python_ref's losses for the same seed and batches (the tolerance of the C++ core's
trajectory test against PyTorch), the checkpoint remembers them, and a resume honours them whatever the
form says by then, loss for loss."""
from __future__ import annotations

import json

from e2e.page_actions import ROOT, fill_training, losses, open_playground, press_train, screenshot, status
from python_ref import tinygpt_file
from python_ref.train import new_run

PRESETS = json.loads((ROOT / "site/static/presets.json").read_text())
TRAJECTORY_RTOL = 1e-3  # tests/wasm/test_native_model.py::test_trajectory_parity_50_adamw_steps: C++ against PyTorch
SETTINGS = {"lr": "0.002", "batch": "8", "warmup-steps": "10", "weight-decay": "0.05"}


def train_with(page, steps, seed, schedule="cosine", **fields) -> str:
    """Train tiny with these hyper-parameters (filled after the preset, whose choice resets Batch)."""
    fill_training(page, "tiny", steps, seed=seed, save_every=1)
    fill_hyper(page, schedule, **fields)
    ended = page.evaluate("window.playground.runsEnded")
    press_train(page)
    page.wait_for_function(f"window.playground.runsEnded > {ended}")
    return status(page)


def fill_hyper(page, schedule="cosine", **fields):
    for field, value in {**SETTINGS, **fields}.items():
        page.fill(f"#{field}", value)
    page.select_option("#lr-schedule", schedule)


def test_fields_default_to_presets_json_and_refuse_bad_values(server_url, page):
    open_playground(page, server_url)
    shown = {f: page.input_value(f"#{f}") for f in ("lr", "batch", "warmup-steps", "lr-schedule", "weight-decay")}
    print(f"\ndefaults: {shown}")
    training, page_defaults = PRESETS["training"], PRESETS["page"]
    assert float(shown["lr"]) == training["lr"] and float(shown["weight-decay"]) == training["weightDecay"]
    assert int(shown["batch"]) == PRESETS["presets"][PRESETS["defaultPreset"]]["batch"]
    assert int(shown["warmup-steps"]) == page_defaults["warmupSteps"]
    assert shown["lr-schedule"] == page_defaults["lrSchedule"]
    page.select_option("#preset", "large")
    assert page.input_value("#batch") == str(PRESETS["presets"]["large"]["batch"])
    page.select_option("#preset", "tiny")
    for field, value, phrase in [("lr", "0", "Learning rate 0 is out of range"),
                                 ("lr", "fast", 'Learning rate "fast" is not a number'),
                                 ("batch", "2.5", "Batch must be a whole number"),
                                 ("batch", "0", "Batch 0 is out of range"),
                                 ("warmup-steps", "-1", "Warm-up steps -1 is out of range"),
                                 ("weight-decay", "3", "Weight decay 3 is out of range")]:
        fill_hyper(page, "none", **{field: value})
        page.click("#start")
        message = page.locator("#train-errors").inner_text()
        print(message)
        assert phrase in message and page.evaluate("window.playground.loaded") is None
        assert page.evaluate("document.activeElement.id") == field  # the error takes the focus to its field
    assert page.errors == []


def test_warmup_and_cosine_follow_python_ref_and_resume_honours_them(server_url, page, tmp_path):
    steps, seed = 50, 11
    reference = new_run("tiny", device="cpu", seed=seed, steps=steps, lr=0.002, batch=8, weightDecay=0.05,
                        options={"lrSchedule": "cosine", "warmupSteps": 10})
    reference.run(steps, progress=False)
    python = [loss for _, loss in reference.loss_history]
    flat = new_run("tiny", device="cpu", seed=seed, steps=steps, lr=0.002, batch=8, weightDecay=0.05)
    flat.run(steps, progress=False)

    open_playground(page, server_url)
    text = train_with(page, steps, seed)
    assert text.startswith(f"Finished: step {steps}/{steps}"), text
    got = losses(page)[1:]
    rel = max(abs(a - b) / b for a, b in zip(got, python))
    apart = max(abs(a - b) / b for a, b in zip([x for _, x in flat.loss_history], python))
    print(f"\ntiny, seed {seed}, lr 0.002, batch 8, warm-up 10, cosine, weight decay 0.05: page (WebAssembly) vs "
          f"python_ref, {steps} losses, max relative difference {rel:.2e} (a constant schedule is {apart:.2e} away)")
    assert len(got) == steps and rel < TRAJECTORY_RTOL and apart > 10 * rel

    with page.expect_download() as d:
        page.click("#download")
    path = tmp_path / "cosine.tinygpt"
    d.value.save_as(path)
    training = tinygpt_file.read_state(path).header["training"]
    print(f"the file's training: {training}")
    assert {k: training[k] for k in ("lr", "batch", "warmupSteps", "lrSchedule", "weightDecay", "steps", "seed")} == \
        {"lr": 0.002, "batch": 8, "warmupSteps": 10, "lrSchedule": "cosine", "weightDecay": 0.05, "steps": steps,
         "seed": seed}

    # a longer run with these settings, uninterrupted; then the same run stopped part-way, the form changed to
    # other settings, and Resume: the checkpoint's settings, loss for loss
    long = 300
    train_with(page, long, seed)
    uninterrupted = losses(page)
    assert len(uninterrupted) == long + 1
    finished_id = page.evaluate("window.playground.loaded.id")
    fill_training(page, "tiny", long, seed=seed, save_every=1)
    fill_hyper(page)
    page.click("#start")
    page.click("#new-model")
    page.wait_for_function(f"window.playground.loaded.id !== '{finished_id}' && window.playground.lastSaved?.id === "
                           "window.playground.loaded.id && window.playground.lastSaved.step >= 20")
    run_id = page.evaluate("window.playground.loaded.id")
    page.click("#stop")
    page.wait_for_function("document.getElementById('status').textContent.startsWith('Stopped')")
    stopped_at = page.evaluate("window.playground.loaded.step")
    fill_hyper(page, "none", lr="0.01", **{"warmup-steps": "0", "weight-decay": "0"})
    ended = page.evaluate("window.playground.runsEnded")
    page.locator(f"#checkpoints tbody tr[data-id='{run_id}'] button[name=resume]").click()
    page.wait_for_function(f"window.playground.runsEnded > {ended}")
    resumed = losses(page)
    print(f"stopped at step {stopped_at} of {long}; the form set to lr 0.01, constant, no warm-up, no decay; "
          f"Resume: {status(page)}; steps {stopped_at + 1}-{long} identical to the uninterrupted run: "
          f"{resumed[stopped_at + 1:] == uninterrupted[stopped_at + 1:]}")
    assert stopped_at < long and resumed[1:] == uninterrupted[1:]
    # the form follows the model: its own settings, not those typed before Resume
    assert page.input_value("#lr") == "0.002" and page.input_value("#lr-schedule") == "cosine"
    screenshot(page, "hyperparameters_resumed")
    assert page.errors == []
