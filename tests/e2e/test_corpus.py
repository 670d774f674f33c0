"""Choosing what to train on: pasted text, an uploaded file of any bytes (its control bytes and
invalid UTF-8 shown escaped in a sample), rows of a Hugging Face dataset through the real client
code reaching a local stand-in of the datasets-server at the official origin (byte counter, cache,
token, Cancel, 429, 404, 500, a malformed body), the token kept from any other host, and corpora
that cannot train: each refused with a sentence, nothing started, nothing lost."""
from __future__ import annotations

import hashlib
import re
import time

import pytest

from e2e.page_actions import open_playground, screenshot, status, train
from python_ref.data import Corpus, CorpusError
from support.hf_rows_stand_in import stories_bytes

OFFICIAL = "https://datasets-server.huggingface.co"  # conftest resolves it to the TLS stand-in


def corpus_info(page) -> str:
    return page.locator("#corpus-info").inner_text()


def test_pasted_text_trains_and_its_split_is_shown(server_url, page):
    open_playground(page, server_url)
    text = "".join(f"Line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(60))
    page.select_option("#corpus-source", "paste")
    page.fill("#corpus-text", text)
    page.select_option("#preset", "tiny")
    n = len(text.encode())
    want = (f"pasted text: {n:,} bytes. With tiny (context 32): "
            f"train {n - n // 10:,} bytes, validation {n // 10:,} bytes")
    page.wait_for_function(f"document.getElementById('corpus-info').textContent.startsWith({want!r})")
    print(f"\n{corpus_info(page)}")
    train(page, "tiny", 20)
    identity = page.evaluate("window.playground.corpus")
    print(f"trained on {identity}; {status(page)}")
    assert identity == {"name": "pasted text", "bytes": n, "sha256": hashlib.sha256(text.encode()).hexdigest()}
    assert status(page).startswith("Finished: step 20/20")
    page.wait_for_function("window.playground.saved.length > 0")
    assert page.evaluate("window.playground.saved[0].corpus.name") == "pasted text"  # the row keeps the identity
    assert page.errors == []


def test_uploaded_bytes_train_and_samples_show_escapes(server_url, page, tmp_path):
    open_playground(page, server_url)
    corpus = tmp_path / "bells.bin"
    corpus.write_bytes(b"ding\x07 dong\x07 \xff\xfe bell\x01\n" * 500)  # control bytes and invalid UTF-8
    page.select_option("#corpus-source", "file")
    page.set_input_files("#corpus-file", str(corpus))
    want = f"bells.bin: {corpus.stat().st_size:,} bytes"
    page.wait_for_function(f"document.getElementById('corpus-info').textContent.startsWith({want!r})", timeout=10_000)
    train(page, "tiny", 200)
    page.fill("#prompt", "ding")
    page.fill("#max-new", "120")
    page.click("#sample-button")
    page.wait_for_function("!document.getElementById('sample-button').disabled")
    shown = page.locator("#sample-output").inner_text()
    escapes = page.locator("#sample-output .escape").all_inner_texts()
    print(f"\nsample: {shown!r}\nescapes: {sorted(set(escapes))}; "
          f"model line: {page.locator('#sample-model').inner_text()!r}")
    # the model barely learned the corpus: whatever bytes it makes, the controls and the bytes that are
    # not UTF-8 come out as escapes
    assert (any(re.fullmatch(r"\\x[01][0-9a-f]", e) for e in escapes)
            and any(re.fullmatch(r"\\x[89a-f][0-9a-f]", e) for e in escapes))
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f\ufffd]", shown)  # no raw control byte, no replacement box
    assert page.locator("#sample-model").inner_text() == "From tiny at step 200 (trained here), on WebAssembly."
    screenshot(page, "corpus_binary_sample")
    assert page.errors == []


def fetch_rows(page, dataset_id: str, cap_mb: str = "0.02", token: str = ""):
    page.fill("#hf-id", dataset_id)
    page.fill("#hf-cap", cap_mb)
    page.fill("#hf-token", token)
    page.dispatch_event("#hf-token", "change")
    page.click("#hf-fetch")


def wait_fetch_ended(page) -> str:
    page.wait_for_function("!document.getElementById('hf-fetch').disabled")
    return page.locator("#hf-progress").inner_text()


def requests_seen(page, base: str) -> list[dict]:
    return page.evaluate(f"fetch({base + '/_requests'!r}).then((r) => r.json())")


def test_hugging_face_rows_from_the_stand_in(server_url, page):
    open_playground(page, server_url)
    page.select_option("#corpus-source", "hf")
    assert page.locator("#hf-base").inner_text() == f"Rows are read from {OFFICIAL}/rows."
    assert "warning" not in page.locator("#hf-base").get_attribute("class")
    stand_in = OFFICIAL
    before = len(requests_seen(page, stand_in))
    page.evaluate("""window.counter = []; new MutationObserver(() => window.counter.push(
      document.getElementById('hf-progress').textContent))"""
                  ".observe(document.getElementById('hf-progress'), {childList: true})")
    fetch_rows(page, "stand-in/stories/default/train/text", "0.02", token="hf_stand_in_token")
    done = wait_fetch_ended(page)
    cap = round(0.02 * 1024 * 1024)
    counted = [int(m[1].replace(",", "")) for t in page.evaluate("window.counter")
               if (m := re.match(r"Fetched ([\d,]+) of", t))]
    seen = requests_seen(page, stand_in)[before:]
    print(f"\n{done}\nbyte counter: {counted}\n"
          f"requests: {[(r['offset'], r['authorization']) for r in seen]}\n{corpus_info(page)}")
    assert counted == sorted(counted) and len(counted) >= 2 and counted[-1] == cap
    assert f"Fetched {cap:,} bytes of stand-in/stories. Kept in this browser's cache (OPFS)." == done
    assert [r["offset"] for r in seen] == [str(100 * i) for i in range(len(seen))]
    assert all(r["authorization"] == "Bearer hf_stand_in_token" for r in seen)
    assert page.evaluate("localStorage.getItem('tinygpt.hfToken')") == "hf_stand_in_token"

    # the same dataset again comes from OPFS, with no request
    fetch_rows(page, "stand-in/stories/default/train/text", "0.02", token="hf_stand_in_token")
    again = wait_fetch_ended(page)
    assert "from this browser's cache (OPFS): no request made" in again
    assert len(requests_seen(page, stand_in)) == before + len(seen)

    train(page, "tiny", 10)
    identity = page.evaluate("window.playground.corpus")
    print(f"trained on {identity}")
    assert identity["bytes"] == cap and identity["sha256"] == hashlib.sha256(stories_bytes(cap)).hexdigest()
    screenshot(page, "corpus_hf_stand_in")

    # failures: a sentence each; the corpus fetched above stays the one in use
    for dataset, phrase in [("stand-in/rate-limited", "is rate-limiting these requests (HTTP 429: Rate limit reached"),
                            ("nobody/no-such-dataset",
                             "answered HTTP 404 for nobody/no-such-dataset: The dataset does not exist"),
                            ("stand-in/broken", "answered HTTP 500 for stand-in/broken: Unexpected error."),
                            ("stand-in/malformed", "with something that is not JSON")]:
        fetch_rows(page, f"{dataset}/default/train/text")
        message = wait_fetch_ended(page)
        print(message)
        assert phrase in message and page.locator("#hf-progress").get_attribute("class") == "note error"
        assert corpus_info(page).startswith(f"stand-in/stories (default/train, column text, up to {cap:,} bytes): "
                                            f"{cap:,} bytes.")
    fetch_rows(page, "stand-in/stories/default/train/title")
    print(wait_fetch_ended(page))
    assert 'has no column "title" (its columns: text, id)' in page.locator("#hf-progress").inner_text()

    # Cancel while slow pages arrive
    fetch_rows(page, "stand-in/slow/default/train/text", "1")
    page.wait_for_function("/^Fetched [\\d,]+ of/.test(document.getElementById('hf-progress').textContent)")
    t0 = time.monotonic()
    page.click("#hf-cancel")
    cancelled = wait_fetch_ended(page)
    print(f"{cancelled} ({(time.monotonic() - t0) * 1000:.0f} ms after Cancel)")
    assert re.match(r"Cancelled after [\d,]+ bytes: the corpus was not changed\.", cancelled)
    assert time.monotonic() - t0 < 1.0
    assert corpus_info(page).startswith("stand-in/stories (default/train")
    assert page.errors == []


@pytest.mark.parametrize("kind", ["lookalike", "user part", "another host"])
def test_the_token_goes_only_to_hugging_face(server_url, page, hf_stand_ins, kind):
    port = hf_stand_ins.plain.rsplit(":", 1)[1]
    base = {"lookalike": hf_stand_ins.lookalike, "another host": hf_stand_ins.plain,
            "user part": f"http://datasets-server.huggingface.co@127.0.0.1:{port}"}[kind]
    page.goto(f"{server_url}/?datasets-server={base}")
    page.wait_for_function("document.querySelectorAll('#features li').length >= 6")
    page.select_option("#corpus-source", "hf")
    note = page.locator("#hf-base")
    print(f"\n{kind}: {base}\n  the page says: {note.inner_text()}")
    assert "warning" in note.get_attribute("class") and note.is_visible()
    assert "not Hugging Face's datasets-server, so your token is not sent to it" in note.inner_text()
    before = len(requests_seen(page, hf_stand_ins.plain))
    fetch_rows(page, "stand-in/stories/default/train/text", "0.02", token="hf_secret_token")
    message = wait_fetch_ended(page)
    seen = requests_seen(page, hf_stand_ins.plain)[before:]
    print(f"  fetch: {message}\n  requests that reached the stand-in: "
          f"{[(r['offset'], r['authorization']) for r in seen]}")
    assert all(r["authorization"] is None for r in seen)
    if kind == "user part":  # fetch() refuses a URL with credentials: nothing is sent at all
        assert seen == [] and "could not reach" in message
    else:
        assert len(seen) >= 2 and message.startswith("Fetched")
    screenshot(page, f"corpus_hf_token_{kind.replace(' ', '_')}")


def python_refusal(raw: bytes, ctx: int) -> str:
    with pytest.raises(CorpusError) as e:
        Corpus.from_bytes(raw, "x").split(0.1, ctx)
    return str(e.value)


def test_corpora_that_cannot_train_are_refused_and_nothing_is_lost(server_url, page, tmp_path):
    open_playground(page, server_url)
    train(page, "tiny", 10)
    loaded = page.evaluate("window.playground.loaded.id")
    page.wait_for_function("window.playground.saved.length > 0")  # the run's last save is listed after "Finished"
    saved = page.evaluate("window.playground.saved.length")
    page.select_option("#corpus-source", "paste")
    short = b"abc" * 100
    for text, phrase in [("", 'The corpus "pasted text" is empty'),
                         (short.decode(), 'The corpus "pasted text" has 300 bytes: too short for a context of 32'),
                         ("a" * 5000, "is one byte repeated (5,000 × 0x61 'a'): there is nothing to learn from it")]:
        page.fill("#corpus-text", text)
        page.click("#start")  # refused before the continue-or-new question is asked
        page.wait_for_function("document.getElementById('train-errors').textContent !== ''")
        message = page.locator("#train-errors").inner_text()
        print(f"\n{message}")
        assert phrase in message and not page.evaluate("document.getElementById('continue-dialog').open")
        assert page.evaluate("window.playground.loaded.id") == loaded and status(page).startswith("Finished")
        page.evaluate("document.getElementById('train-errors').textContent = ''")
    # the page's sizes are python_ref's: the same numbers in both refusals of a too-short corpus
    page.fill("#corpus-text", short.decode())
    page.wait_for_function("document.getElementById('corpus-info').textContent.includes('too short')")
    def numbers(s):
        return re.findall(r"\d[\d,]*", s.split("bytes:", 1)[1])
    print(python_refusal(short, 32))
    assert numbers(corpus_info(page)) == numbers(python_refusal(short, 32))

    # a 2 GB file is refused by its size, before a byte is read
    huge = tmp_path / "huge.txt"
    with open(huge, "wb") as f:
        f.truncate(2 * 1024 ** 3)  # sparse: no disk used
    page.select_option("#corpus-source", "file")
    t0 = time.monotonic()
    page.set_input_files("#corpus-file", str(huge))
    page.wait_for_function("document.getElementById('corpus-info').textContent.startsWith('huge.txt is 2.00 GB')")
    refused_in = time.monotonic() - t0
    print(f"{corpus_info(page)} ({refused_in * 1000:.0f} ms)")
    assert "up to 256.0 MB" in corpus_info(page) and refused_in < 5
    page.click("#start")
    page.wait_for_function("document.getElementById('train-errors').textContent !== ''")
    assert page.locator("#train-errors").inner_text().startswith("huge.txt is 2.00 GB")
    assert not page.evaluate("document.getElementById('continue-dialog').open")
    assert page.evaluate("window.playground.loaded.id") == loaded
    assert page.evaluate("window.playground.saved.length") == saved
    screenshot(page, "corpus_refused")
    assert page.errors == []
