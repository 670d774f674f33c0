"""Two tabs of one browser (two pages of one browser context, sharing OPFS, Web Locks and BroadcastChannel),
as a person with two tabs open meets them (issue 58): tab B lists tab A's new save within 2 s without a
reload; a model training in tab A cannot be deleted, renamed or resumed in tab B, which says why (it can be
opened there read-only to sample); and a row deleted in B is never re-created by A's later saves."""
from __future__ import annotations

import pytest

from e2e.page_actions import PAGE_WAIT_MS, open_playground, parse, screenshot, start_long_run, status, watched

# Keeps Date.now() of the moment a row with this id first appears in the Saved models table (window.rowSeenAt).
WATCH_ROW = """(id) => {
  window.rowSeenAt = null;
  const found = () => document.querySelector(`#checkpoints tbody tr[data-id='${id}']`);
  if (found()) { window.rowSeenAt = Date.now(); return; }
  const o = new MutationObserver(() => { if (found()) { o.disconnect(); window.rowSeenAt = Date.now(); } });
  o.observe(document.getElementById('checkpoints'), { childList: true, subtree: true });
}"""
# Every file left in OPFS for a run id.
FILES_OF = """async (id) => {
  const dir = await (await navigator.storage.getDirectory()).getDirectoryHandle('checkpoints');
  const names = [];
  for await (const [name] of dir.entries()) if (name.startsWith(id + '-')) names.push(name);
  return names;
}"""


@pytest.fixture
def tabs(browser):
    context = browser.new_context()
    a, b = watched(context.new_page()), watched(context.new_page())
    try:
        yield a, b
        for p in (a, b):
            assert p.csp_violations == [], f"Content-Security-Policy violations: {p.csp_violations}"
    finally:
        context.close()


def row(page, run_id):
    return page.locator(f"#checkpoints tbody tr[data-id='{run_id}']")


def test_two_tabs_share_one_truth(server_url, tabs):
    a, b = tabs
    for p in (a, b):
        open_playground(p, server_url)
        p.wait_for_function("window.playground.tabs !== undefined")
    features = b.locator("#features").inner_text()
    print("\n" + "\n".join(line for line in features.splitlines() if "Web Locks" in line or "BroadcastChannel" in line))
    assert "Web Locks: a model training in one tab cannot be resumed or deleted in another" in features
    assert "BroadcastChannel: saved models made in other tabs appear here at once" in features

    # A trains; B's list shows A's first save within 2 s, without a reload
    a.fill("#seed", "5")
    a.fill("#checkpoint-seconds", "1")
    a.select_option("#backend", "wasm")
    start_long_run(a, "tiny")
    run_id = a.evaluate("window.playground.loaded.id")
    b.evaluate(WATCH_ROW, run_id)  # B watches before A's first save
    a.wait_for_function(f"window.playground.lastSaved?.id === '{run_id}'")
    saved_at = a.evaluate("window.playground.lastSaved.at")
    b.wait_for_function("window.rowSeenAt !== null", timeout=5000)
    shown_at = b.evaluate("window.rowSeenAt")
    print(f"A saved {run_id} at step {a.evaluate('window.playground.lastSaved.step')}; "
          f"B listed it {shown_at - saved_at} ms after A heard its save, without a reload")
    assert shown_at - saved_at < 2000
    b.wait_for_function(f"document.querySelector(`#checkpoints tbody tr[data-id='{run_id}'] .busy-badge`) !== null")
    badge = row(b, run_id).locator(".busy-badge").inner_text()
    print(f"B's row: {badge}")
    assert badge.startswith("training in another tab")
    for name in ("resume", "rename", "delete"):
        assert row(b, run_id).locator(f"button[name={name}]").is_disabled(), name
    assert row(b, run_id).locator("button[name=open]").is_enabled()

    # B cannot delete it, even by selecting it: the message names the reason
    row(b, run_id).locator("input[name=select]").check()
    b.click("#delete-selected")
    message = b.locator("#saved-message").inner_text()
    print(f"B, Delete selected: {message}")
    assert message == ('"tiny, seed 5" was not deleted: it is training in another tab: open it here to sample; '
                       "stop it there to resume, rename or delete it.")
    assert row(b, run_id).count() == 1

    # B opens it read-only to sample; continuing it here is refused with the reason
    row(b, run_id).locator("button[name=open]").click()
    b.wait_for_function("window.playground.loaded?.source === 'saved'")
    opened = status(b)
    print(f"B opened it: {opened}")
    assert "Opened read-only: another tab of this browser is training it." in opened
    b.fill("#max-new", "20")
    b.fill("#sample-seed", "1")
    b.click("#sample-button")
    b.wait_for_function("!document.getElementById('sample-button').disabled && "
                        "document.getElementById('sample-output').textContent.length > 10")
    b.fill("#steps", "10")
    b.click("#start")
    b.wait_for_selector("#continue-dialog[open]")
    b.click("#continue-model")
    b.wait_for_function("document.getElementById('status').classList.contains('error')")
    refused = status(b)
    print(f"B, Continue: {refused}")
    assert '"tiny, seed 5" is training in another tab of this browser, which alone may write it' in refused
    screenshot(b, "two_tabs_b_refused")

    # A stops: B's badge goes (the lock is free), and B may now delete the row
    a.click("#stop")
    a.wait_for_function("document.getElementById('status').textContent.startsWith('Stopped')")
    a_step = parse(status(a))["step"]
    b.wait_for_function(f"document.querySelector(`#checkpoints tbody tr[data-id='{run_id}']`)?.dataset.busy "
                        "=== undefined", timeout=2000)
    asked = []
    b.once("dialog", lambda d: (asked.append(d.message), d.accept()))
    row(b, run_id).locator("button[name=delete]").click()
    b.wait_for_function(f"document.querySelector(`#checkpoints tbody tr[data-id='{run_id}']`) === null")
    print(f"B, Delete: {asked[0]}")
    assert f"(step {a_step})" in asked[0] or f"step {a_step}" in asked[0]
    a.wait_for_function(f"document.querySelector(`#checkpoints tbody tr[data-id='{run_id}']`) === null", timeout=2000)
    a.wait_for_function("window.playground.loaded.deleted === true", timeout=2000)

    # A still holds the model: continuing it trains, but no save re-creates the deleted row
    a.fill("#steps", "30")
    a.click("#start")
    a.wait_for_selector("#continue-dialog[open]")
    question = a.locator("#continue-text").inner_text()
    print(f"A, Train: {question}")
    assert "was deleted from Saved models" in question and "stays in Saved models" not in question
    ended = a.evaluate("window.playground.runsEnded")
    a.click("#continue-model")
    a.wait_for_function(f"window.playground.runsEnded > {ended}", timeout=PAGE_WAIT_MS)
    print(f"A: {status(a)}; notice: {a.locator('#notice').inner_text()}")
    assert status(a).startswith(f"Finished: step {a_step + 30}/")
    assert "this run is not saved" in a.locator("#notice").inner_text()
    b.reload()
    open_playground(b, server_url)
    b.wait_for_timeout(500)
    assert row(b, run_id).count() == 0 and row(a, run_id).count() == 0
    assert b.evaluate(FILES_OF, run_id) == []
    print(f"after A's run on the deleted model and B's reload: no row and no file of {run_id}")
    screenshot(a, "two_tabs_a_after_delete")
    screenshot(b, "two_tabs_b_after_delete")
    assert a.errors == [] and b.errors == []
