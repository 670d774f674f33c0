"""Saved models as a person keeps them (issue 58): any saved model opens to sample and evaluate without
training; resuming on another corpus than the model's asks first, and the checkpoint keeps every corpus it
trained on (python_ref reads that list and carries it on); one row per identical model (the same upload
twice, the demo twice); a corpus column; rename; storage used, quota and persistence; select and delete
several; a delete confirmation that names the model's current step; the Validation column and Evaluate
told apart."""
from __future__ import annotations

import subprocess
import sys

from e2e.page_actions import ROOT, fill_training, open_playground, parse, screenshot, status, train
from python_ref import tinygpt_file

PASTED = b"the quick brown fox jumps over the lazy dog. " * 40


def rows(page):
    return page.locator("#checkpoints tbody tr")


def row(page, run_id):
    return page.locator(f"#checkpoints tbody tr[data-id='{run_id}']")


def ids(page):
    return rows(page).evaluate_all("rows => rows.map((r) => r.dataset.id)")


def new_run_stopped(page, steps, seed, at_least):
    """A new tiny run of `steps`, stopped once a save at step >= at_least is in; returns (id, stopped step)."""
    before = page.evaluate("window.playground.loaded?.id ?? null")
    fill_training(page, "tiny", steps, seed=seed, save_every=1)
    page.click("#start")
    if before:
        page.click("#new-model")
    page.wait_for_function(f"window.playground.loaded && window.playground.loaded.id !== {before!r} && "
                           f"window.playground.lastSaved?.id === window.playground.loaded.id && "
                           f"window.playground.lastSaved.step >= {at_least}".replace("None", "null"))
    page.click("#stop")
    page.wait_for_function("document.getElementById('status').textContent.startsWith('Stopped')")
    return page.evaluate("window.playground.loaded.id"), parse(status(page))["step"]


def runs_ended(page):
    return page.evaluate("window.playground.runsEnded")


def test_any_saved_model_opens_and_another_corpus_is_asked_for(server_url, page, tmp_path):
    open_playground(page, server_url)
    page.select_option("#backend", "wasm")
    run_id, stopped = new_run_stopped(page, 400, seed=3, at_least=30)

    # Open: in memory to sample and evaluate, nothing trained
    page.select_option("#preset", "small")
    ended = runs_ended(page)
    row(page, run_id).locator("button[name=open]").click()
    page.wait_for_function("window.playground.loaded?.source === 'saved'")
    opened = status(page)
    page.fill("#max-new", "40")
    page.fill("#sample-seed", "1")
    page.click("#sample-button")
    page.wait_for_function("!document.getElementById('sample-button').disabled && "
                           "document.getElementById('sample-output').textContent.length > 40")
    page.click("#evaluate")
    page.wait_for_function("window.playground.evaluated !== null")
    print(f"\n{opened}\n{page.locator('#sample-output').inner_text()!r}\n{page.locator('#evaluation').inner_text()}")
    assert opened == f"Loaded tiny at step {stopped} of 400 (saved checkpoint)."
    assert runs_ended(page) == ended and page.evaluate("window.playground.loaded.step") == stopped
    assert page.evaluate("window.playground.evaluated.step") == stopped

    # another corpus chosen: Resume asks first; Cancel starts nothing
    page.select_option("#corpus-source", "paste")
    page.fill("#corpus-text", PASTED.decode())
    page.wait_for_timeout(400)  # the picker reads pasted text after a pause in typing
    row(page, run_id).locator("button[name=resume]").click()
    page.wait_for_selector("#corpus-dialog[open]")
    question = page.locator("#corpus-question").inner_text()
    print(question)
    assert question == ("This model was trained on tinyshakespeare.txt (1,115,394 bytes); the corpus chosen in Train "
                        f"is pasted text ({len(PASTED):,} bytes). Which should it train on now?")
    assert page.locator("#corpus-model").is_enabled()  # this tab holds TinyShakespeare's text
    screenshot(page, "saved_models_corpus_question")
    page.click("#corpus-cancel")
    page.wait_for_timeout(300)
    assert runs_ended(page) == ended and page.evaluate("window.playground.loaded.step") == stopped

    # this model's corpus: it resumes on TinyShakespeare, whatever is chosen
    row(page, run_id).locator("button[name=resume]").click()
    page.wait_for_selector("#corpus-dialog[open]")
    page.click("#corpus-model")
    page.wait_for_function(f"window.playground.runsEnded > {ended}")
    assert status(page).startswith("Finished: step 400/400"), status(page)

    # Continue on the chosen corpus, after saying so
    ended = runs_ended(page)
    page.fill("#steps", "20")
    page.click("#start")
    page.click("#continue-model")
    page.wait_for_selector("#corpus-dialog[open]")
    page.click("#corpus-chosen")
    page.wait_for_function(f"window.playground.runsEnded > {ended}")
    assert status(page).startswith("Finished: step 420/420"), status(page)
    corpus_cell = row(page, run_id).locator("td.row-corpus").inner_text()
    print(f"Corpus column: {corpus_cell}")
    assert corpus_cell == "tinyshakespeare.txt (steps 1–400), then pasted text (steps 401–420)"
    with page.expect_download() as d:
        page.click("#download")
    path = tmp_path / "two-corpora.tinygpt"
    d.value.save_as(path)
    header = tinygpt_file.read_state(path).header
    stretches = [(c["name"], c["fromStep"], c["toStep"]) for c in header["corpora"]]
    print(f"the file's corpora: {stretches}; corpus {header['corpus']['name']}")
    assert [(c["name"], c["bytes"], c["fromStep"], c["toStep"]) for c in header["corpora"]] == \
        [("tinyshakespeare.txt", 1115394, 0, 400), ("pasted text", len(PASTED), 400, 420)]
    assert header["corpus"]["name"] == "pasted text"

    # python_ref reads the list and carries it on when it resumes the file on the same text
    pasted = tmp_path / "pasted.txt"
    pasted.write_bytes(PASTED)
    out = tmp_path / "resumed.tinygpt"
    subprocess.run([sys.executable, "-m", "python_ref.cli", "train", "--resume", str(path), "--corpus", str(pasted),
                    "--steps", "425", "--device", "cpu", "--quiet", "--out", str(out)], cwd=ROOT, check=True,
                   capture_output=True, timeout=300)
    resumed = tinygpt_file.read_state(out).header["corpora"]
    print(f"python_ref resumed it to step 425: {[(c['name'], c['fromStep'], c['toStep']) for c in resumed]}")
    assert [(c["name"], c["fromStep"], c["toStep"]) for c in resumed] == \
        [("tinyshakespeare.txt", 0, 400), ("pasted text", 400, 425)]
    screenshot(page, "saved_models_two_corpora")
    assert page.errors == []


def test_saved_models_one_row_each_rename_storage_and_deleting_several(server_url, page, tmp_path):
    open_playground(page, server_url)
    page.select_option("#backend", "wasm")
    train(page, "tiny", 15, seed=4, save_every=1)
    first = page.evaluate("window.playground.loaded.id")
    assert row(page, first).locator("td.row-corpus").inner_text() == "tinyshakespeare.txt"

    # the same model uploaded twice (the page's own file) is the row it came from
    with page.expect_download() as d:
        page.click("#download")
    path = tmp_path / "same.tinygpt"
    d.value.save_as(path)
    for i in range(2):
        # the first upload's notice would satisfy the wait below before the second upload is read
        page.evaluate("document.getElementById('notice').textContent = ''")
        page.set_input_files("#upload", str(path))
        page.wait_for_function("window.playground.loaded?.source === 'upload' && "
                               "document.getElementById('notice').textContent.includes('same model')")
        print(f"\nupload {i + 1}: {page.locator('#notice').inner_text()}")
        assert ids(page) == [first] and page.evaluate("window.playground.loaded.id") == first

    # the demo twice: one row, one copy in storage
    sizes = []
    for i in range(2):
        page.evaluate("document.getElementById('notice').textContent = ''")
        page.click("#load-demo")
        page.wait_for_function("window.playground.loaded?.source === 'demo' && window.playground.phase === 'idle' && "
                               "document.querySelectorAll('#checkpoints tbody tr').length === 2" +
                               (" && document.getElementById('notice').textContent.includes('same model')"
                                if i else ""))
        page.wait_for_function("window.playground.storage?.startsWith('Storage:')")
        page.wait_for_timeout(500)
        sizes.append(page.evaluate("navigator.storage.estimate().then((e) => e.usage)"))
        print(f"demo {i + 1}: {len(ids(page))} rows; {page.locator('#storage').inner_text()} "
              f"{page.locator('#notice').inner_text()}")
    demo = page.evaluate("window.playground.loaded.id")
    assert len(ids(page)) == 2 and sizes[1] - sizes[0] < 1_000_000, sizes
    storage = page.locator("#storage").inner_text()
    assert storage.startswith("Storage: ") and " used of " in storage and "Persistent: " in storage

    # Evaluate and the Validation column: told apart where the number is shown
    page.click("#evaluate")
    page.wait_for_function("window.playground.evaluated !== null")
    evaluation = page.locator("#evaluation").inner_text()
    print(evaluation)
    assert "Saved models lists 1.5244 as its Validation: the lowest loss measured while it trained" in evaluation
    assert "Evaluate measures the model as it is now" in page.locator("#validation-note").inner_text()

    # rename, kept across a reload
    page.once("dialog", lambda dlg: dlg.accept("Shakespeare demo"))
    row(page, demo).locator("button[name=rename]").click()
    page.wait_for_function(f"document.querySelector(`#checkpoints tr[data-id='{demo}'] .row-name`)"
                           ".textContent.startsWith('Shakespeare demo')")
    assert page.evaluate("window.playground.loaded.name") == "Shakespeare demo"

    # select and delete several; the confirmation names each model's step
    train(page, "tiny", 10, seed=5, save_every=1)
    train(page, "tiny", 12, seed=6, save_every=1)
    page.wait_for_function("document.querySelectorAll('#checkpoints tbody tr').length === 4")
    extra = [i for i in ids(page) if i not in (first, demo)]
    assert len(extra) == 2
    for run_id in extra:
        row(page, run_id).locator("input[name=select]").check()
    asked = []
    page.once("dialog", lambda dlg: (asked.append(dlg.message), dlg.accept()))
    page.click("#delete-selected")
    page.wait_for_function("document.querySelectorAll('#checkpoints tbody tr').length === 2")
    print(asked[0])
    assert asked[0].startswith("Delete 2 saved models: ") and '"tiny, seed 5" (step 10)' in asked[0] \
        and '"tiny, seed 6" (step 12)' in asked[0] and "cannot be undone" in asked[0]

    # the confirmation names the step the model is at now: opened at 15, trained on to 25
    row(page, first).locator("button[name=open]").click()
    page.wait_for_function(f"window.playground.loaded?.id === '{first}' && window.playground.loaded.source === 'saved'")
    ended = runs_ended(page)
    page.fill("#steps", "10")
    page.click("#start")
    page.click("#continue-model")
    page.wait_for_function(f"window.playground.runsEnded > {ended}")
    asked.clear()
    page.once("dialog", lambda dlg: (asked.append(dlg.message), dlg.dismiss()))
    row(page, first).locator("button[name=delete]").click()
    page.wait_for_timeout(300)
    print(asked[0])
    assert asked[0].startswith('Delete the saved model "tiny, seed 4" (step 25)?')

    page.reload()
    open_playground(page, server_url)
    page.wait_for_function("document.querySelectorAll('#checkpoints tbody tr').length === 2")
    assert row(page, demo).locator(".row-name").inner_text().startswith("Shakespeare demo")
    screenshot(page, "saved_models_after_reload")
    assert page.errors == []


def test_a_browser_without_storage_estimates_or_persistence_says_so(server_url, page):
    page.add_init_script("delete StorageManager.prototype.estimate; delete StorageManager.prototype.persist; "
                         "delete StorageManager.prototype.persisted;")
    open_playground(page, server_url)
    page.wait_for_function("document.getElementById('storage').textContent !== ''")
    said = page.locator("#storage").inner_text()
    print(f"\n{said}")
    assert said == ("This browser does not say how much storage this site uses (no navigator.storage.estimate). "
                    "This browser cannot make storage persistent: it may clear saved models when space runs low; "
                    "download the ones to keep.")
    train(page, "tiny", 5, seed=1, save_every=1)  # saving still works; nothing asks for persistence
    assert len(ids(page)) == 1
    assert page.errors == []
