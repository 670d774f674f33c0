"""Runs side by side (issue 60): a person trains two small runs with different settings, selects them in Saved models,
compares them, and sees their training and validation losses overlaid on one chart (a legend whose boxes hide and show
a run, from the keyboard too; a summary in words) and a table of what differs: here the learning rate, the seed and
the steps, with what is the same in all listed apart. Everything comes from the checkpoints' headers."""
from __future__ import annotations

from e2e.page_actions import open_playground, screenshot, train
from e2e.test_accessibility import AXE, axe, report


def summary_says(page, start: str) -> None:
    page.wait_for_function(f"document.getElementById('runs-summary').textContent.startsWith({start!r})")


def row_ids(page):
    return page.locator("#checkpoints tbody tr").evaluate_all("rows => rows.map((r) => r.dataset.id)")


def test_two_runs_side_by_side(server_url, page):
    open_playground(page, server_url)
    page.fill("#lr", "0.0003")
    first_status = train(page, "tiny", 250, backend="wasm", seed=1)
    first = page.evaluate("window.playground.loaded.id")
    page.fill("#lr", "0.002")
    second_status = train(page, "tiny", 150, backend="wasm", seed=2)
    second = page.evaluate("window.playground.loaded.id")
    print(f"\n{first_status}\n{second_status}")
    assert first_status.startswith("Finished") and second_status.startswith("Finished")
    page.wait_for_function(f"window.playground.saved.filter((s) => [{first!r}, {second!r}].includes(s.id)).length == 2")
    assert page.locator("#compare-selected").is_disabled()
    for run_id in (first, second):
        page.locator(f"#checkpoints tbody tr[data-id='{run_id}'] input[name=select]").check()
    assert page.locator("#compare-selected").inner_text() == "Compare 2 selected"
    page.click("#compare-selected")
    page.wait_for_function("!document.getElementById('runs').hidden && window.playground.runs?.ids.length === 2")

    runs = page.evaluate("window.playground.runs")
    order = [first, second] if row_ids(page).index(first) < row_ids(page).index(second) else [second, first]
    assert runs["ids"] == order  # in the table's order
    header = page.locator("#runs-table thead th").all_inner_texts()
    table = {r.locator("th").inner_text(): r.locator("td").all_inner_texts()
             for r in page.locator("#runs-table tbody tr").all()}
    same = page.locator("#runs-same").inner_text()
    summary_says(page, "Runs side by side, 2 of 2")
    summary = page.locator("#runs-summary").inner_text()
    print(f"columns {header}\n" + "\n".join(f"{k}: {v}" for k, v in table.items()) + f"\n{same}\n{summary}")
    by_id = dict(zip(order, range(2)))
    assert runs["differ"] == ["Steps", "Learning rate", "Seed"]
    assert table["Learning rate"][by_id[first]] == "0.0003" and table["Learning rate"][by_id[second]] == "0.002"
    assert table["Seed"][by_id[first]] == "1" and table["Seed"][by_id[second]] == "2"
    assert table["Steps"][by_id[first]] == "250" and table["Steps"][by_id[second]] == "150"
    assert {"Last training loss", "Best validation loss"} <= set(table)
    assert "Preset: tiny;" in same and "Engine: WebAssembly;" in same and "Corpus: tinyshakespeare.txt;" in same
    assert "Runs side by side, 2 of 2 shown, up to step 250." in summary

    # the legend: one box per run, Space on a focused box hides its run from the chart and the summary
    boxes = page.locator("#runs-legend-items input[type=checkbox]")
    assert boxes.count() == 2
    boxes.nth(1).focus()
    page.keyboard.press("Space")
    summary_says(page, "Runs side by side, 1 of 2")
    page.keyboard.press("Space")
    summary_says(page, "Runs side by side, 2 of 2")
    chart = page.locator("#runs-chart")
    assert chart.get_attribute("role") == "img" and chart.get_attribute("aria-describedby") == "runs-summary"
    page.locator("#runs").scroll_into_view_if_needed()
    screenshot(page, "runs_view")
    blocking = report("runs view (light)", axe(page, AXE.read_text()))
    page.emulate_media(color_scheme="dark")
    page.wait_for_timeout(300)
    page.locator("#runs").screenshot(path=str(screenshot(page, "runs_view_dark")))
    blocking += report("runs view (dark)", axe(page, AXE.read_text()))
    assert blocking == [], blocking  # axe-core: nothing serious or critical with the view shown
