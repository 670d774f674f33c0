"""Checkpoints in OPFS, as a person meets them: a refresh at any moment of a run leaves a checkpoint
that resumes exactly (the losses after Resume are those of the uninterrupted run, bit for bit on the
same WebAssembly build), and a bad upload is refused with the problem named while the saved model
still resumes."""
from __future__ import annotations

import random

from python_ref import tinygpt_file

from e2e.page_actions import FINISHED, fill_training, losses, open_playground, press_train, screenshot, train

SEED = 4242
STEPS = 400
REFRESHES = 6  # each about 10 s on the 2-core box beside another test process

# Every file in OPFS, grouped by run: does each run still have one checkpoint the JS reader accepts?
CHECK_OPFS = """async () => {
  const { readTinyGPT } = await import('/static/js/tinygpt_file.js');
  const dir = await (await navigator.storage.getDirectory()).getDirectoryHandle('checkpoints');
  const runs = {};
  for await (const [name, h] of dir.entries()) {
    const run = name.split('-')[0];
    runs[run] ??= { files: 0, readable: 0 };
    runs[run].files++;
    try { readTinyGPT(new Uint8Array(await (await h.getFile()).arrayBuffer())); runs[run].readable++; } catch {}
  }
  return runs;
}"""


def wait_for_rows(page, n=1):
    page.wait_for_function(f"document.querySelectorAll('#checkpoints tbody tr').length >= {n}")


def test_refresh_at_random_moments_then_resume_is_exact(server_url, page):
    rng = random.Random(11)
    open_playground(page, server_url)
    train(page, "tiny", STEPS, seed=SEED, save_every=1)
    reference = losses(page)
    assert len(reference) == STEPS + 1
    worst = 0.0
    for i in range(REFRESHES):
        previous = page.evaluate("window.playground.loaded?.id ?? null")  # the new run is another one
        fill_training(page, "tiny", STEPS, seed=SEED, save_every=1)
        press_train(page, "new")
        run_id = page.evaluate("(previous) => new Promise((ok) => { const t = setInterval(() => { "
                               "const l = window.playground.loaded; "
                               "if (l && l.id !== previous && l.source === 'new' && "
                               "window.playground.lastSaved?.id === l.id) { "
                               "clearInterval(t); ok(l.id); } }, 5); })", previous)
        page.wait_for_timeout(rng.uniform(0, 2500))
        page.reload()
        open_playground(page, server_url)
        wait_for_rows(page)
        row = page.locator(f"#checkpoints tbody tr[data-id='{run_id}']")
        saved_step = int(row.locator("td").nth(3).inner_text().split()[0])  # select, model, corpus, step
        row.locator("button[name=resume]").click()
        page.wait_for_function(f"window.playground.loaded?.id === '{run_id}'")
        resumed_at = page.evaluate("window.playground.loaded.openedAtStep")  # .step moves on with the run
        assert resumed_at == saved_step
        page.wait_for_function(f"window.playground.losses.length > {min(resumed_at + 20, STEPS)}")
        got = losses(page)
        after = range(resumed_at + 1, min(resumed_at + 21, STEPS + 1))
        diff = max((abs(got[s] - reference[s]) for s in after), default=0.0)
        worst = max(worst, diff)
        print(f"refresh {i + 1}: resumed at step {resumed_at}, next {len(after)} losses differ by at most {diff}")
        assert [got[s] for s in after] == [reference[s] for s in after]
        page.wait_for_function(FINISHED)
        runs = page.evaluate(CHECK_OPFS)
        assert all(r["readable"] >= 1 for r in runs.values()), runs
    print(f"{REFRESHES} refreshes: every resume exact (max difference {worst}); OPFS runs: {len(runs)}")
    screenshot(page, "checkpoints_resumed")
    assert page.errors == []


def test_bad_uploads_are_refused_and_the_saved_model_still_resumes(server_url, page, tmp_path):
    open_playground(page, server_url)
    train(page, "tiny", 30, seed=5, save_every=1)
    wait_for_rows(page)
    loaded_id = page.evaluate("window.playground.loaded.id")
    with page.expect_download() as d:  # the page's own file, to break in several ways
        page.click("#download")
    good = (tmp_path / "good.tinygpt")
    d.value.save_as(good)
    raw = good.read_bytes()
    n = int.from_bytes(raw[8:12], "little")
    flipped = bytearray(raw)
    flipped[len(raw) - 100] ^= 0x40
    header_flipped = bytearray(raw)
    header_flipped[40] ^= 0x01
    wrong_version = bytearray(raw)
    wrong_version[4] = 3
    cases = {
        "truncated": (raw[: 12 + n + 1000], "cut short"),
        "state-crc": (bytes(flipped), "state CRC32 mismatch"),
        "header-crc": (bytes(header_flipped), "header"),
        "version": (bytes(wrong_version), "version 3, which this page cannot read"),
        "not-a-model": (b"\x89PNG\r\n\x1a\n" + bytes(200), "not a TinyGPT model file"),
        "empty": (b"", "cut short"),
    }
    run_status = page.locator("#status").inner_text()
    for name, (data, phrase) in cases.items():
        path = tmp_path / f"{name}.tinygpt"
        path.write_bytes(data)
        page.set_input_files("#upload", str(path))
        # said beside the upload control, in plain words; the Train status line still speaks of the run
        page.wait_for_function("document.getElementById('upload-error').textContent !== ''")
        message = page.locator("#upload-error").inner_text()
        print(f"{name}: {message}")
        assert message.startswith(f"{name}.tinygpt was not loaded: ") and phrase in message, message
        assert "b'" not in message and page.locator("#status").inner_text() == run_status
        assert page.evaluate("window.playground.loaded.id") == loaded_id  # the model in memory is untouched
        page.evaluate("document.getElementById('upload-error').textContent = ''")
    rows_before = page.locator("#checkpoints tbody tr").count()
    page.locator(f"#checkpoints tbody tr[data-id='{loaded_id}'] button[name=open]").click()  # a finished model: Open
    page.wait_for_function("/^Loaded tiny at step 30 /.test(document.getElementById('status').textContent)")
    assert page.evaluate("window.playground.loaded.step") == 30
    assert page.locator("#checkpoints tbody tr").count() == rows_before
    screenshot(page, "checkpoints_bad_uploads")
    assert page.errors == []


def test_a_saved_model_downloads_and_deletes_after_asking(server_url, page, tmp_path):
    open_playground(page, server_url)
    train(page, "tiny", 15, seed=6, save_every=1)
    train(page, "tiny", 15, seed=7, save_every=1)  # a second run: two rows
    wait_for_rows(page, 2)
    first, second = page.locator("#checkpoints tbody tr").evaluate_all("rows => rows.map(r => r.dataset.id)")
    with page.expect_download() as d:
        page.locator(f"#checkpoints tbody tr[data-id='{second}'] button[name=download-fp16]").click()
    path = tmp_path / d.value.suggested_filename
    d.value.save_as(path)
    state = tinygpt_file.read_state(path)
    print(f"\n{d.value.suggested_filename}: step {state.step}, {state.header['weightsDtype']}, "
          f"seed {state.header['training']['seed']}")
    assert state.step == 15 and state.m is None and state.header["training"]["seed"] == 6
    asked = []
    page.once("dialog", lambda dlg: (asked.append(dlg.message), dlg.dismiss()))
    page.locator(f"#checkpoints tbody tr[data-id='{second}'] button[name=delete]").click()
    page.wait_for_timeout(300)
    assert asked and "cannot be undone" in asked[0] and page.locator("#checkpoints tbody tr").count() == 2
    page.once("dialog", lambda dlg: dlg.accept())
    page.locator(f"#checkpoints tbody tr[data-id='{second}'] button[name=delete]").click()
    page.wait_for_function("document.querySelectorAll('#checkpoints tbody tr').length === 1")
    page.reload()
    open_playground(page, server_url)
    wait_for_rows(page)
    assert page.locator("#checkpoints tbody tr").evaluate_all("rows => rows.map(r => r.dataset.id)") == [first]
    screenshot(page, "checkpoints_download_and_delete")
    assert page.errors == []
