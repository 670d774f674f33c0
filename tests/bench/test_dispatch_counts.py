"""bench/webgpu/dispatch_counts.mjs: the dispatches of a training step, an eval batch and a decoded token
per preset. Each is a dependent GPU launch (≥ 5 µs on an H100 with Dawn's barriers), so a fusion that
is undone shows here before it shows in a benchmark. A step of `large` took 177 before the fusions,
139 before the LayerNorms became prologues, 138 before attention's backward and a block's end became
one dispatch each, two more at every preset before AdamW took over the clip coefficient's dispatch
and the embedding's backward the gradient norm's partials, and one more before that backward took
ln_f's parameter gradients too (and, from large up, one more before block 0's first LayerNorm took the
embedding's forward). (Counted with WebGPU's default 16 KiB of workgroup memory; a device that offers
more takes other tiles, pairs more products and splits the pairs whose weight gradient is big and on a
twin tile: on an H100, large took 103.) From medium up, the Linears' weight gradients wait for the end
of the backward, batched over the blocks in one dispatch (Trainer's deferWeightGrads), and each pair on
the chain becomes its input gradient alone (on an H100, large takes 92).
"""
from __future__ import annotations

import json
import subprocess

from conftest import ROOT


def test_dispatches_per_step_are_the_fused_plans():
    r = subprocess.run(["node", str(ROOT / "bench/webgpu/dispatch_counts.mjs")], capture_output=True, text=True,
                       timeout=120, check=True)
    counts = json.loads(r.stdout)
    presets = json.loads((ROOT / "site/static/presets.json").read_text())["presets"]
    for name, c in counts.items():
        print(f"{name}: {c['step']} dispatches per training step, {c['eval']} per eval batch, "
              f"{c['decode']} per decoded token")
    assert set(counts) == set(presets)
    for name, c in counts.items():
        L = presets[name]["nLayer"]
        # each LayerNorm is the prologue of the product after it while rows × C is small (and when decoding)
        prologue = presets[name]["batch"] * presets[name]["ctx"] * presets[name]["dModel"] <= 200_000
        # embedding (in the first LayerNorm's dispatch where that has one), L blocks, (ln_f,) logits, cross-entropy
        assert c["eval"] == (3 + 5 * L if prologue else 3 + 7 * L)
        # the decode chain: 2 a block (the embedding in block 0's first, ln1, q/k/v, attention and o_proj's share of
        # each head, a workgroup per head; ln2, fc_in and fc_out's share of each slice of hidden units), ln_f and the
        # logits
        assert c["decode"] == 1 + 2 * L
        # a block: 5 forward (7 with the LayerNorms apart), then 12 backward: attention's in one dispatch,
        # and the LayerNorms' parameter gradients with the split-K sums of the block's weight gradients
        # in one; 8 when each Linear's two products share one (small models), 11 where only o_proj's do
        # (large: sliced 32×32 tiles on both), 10 where only fc_in's and fc_out's do (huge: 64×64 on
        # both), 9 where all three do (xl, massive), 16 with one sum per product (one more for the
        # head's, whose two products pair too from large up); fewer where a weight gradient does not split K
        assert c["step"] <= 12 + 22 * L, (name, c["step"])
    assert counts["tiny"]["step"] == 7 + 13 * 2
    # deferred (medium up): the forward, cross-entropy's backward, the head's (a pair, or its two products
    # apart), ln_f's backward, 8 a block (the four input gradients, ln2's, attention's and ln1's backward,
    # the LayerNorms' parameter gradients, which also sum the head's split-K slabs), the weight gradients
    # batched over the blocks in one dispatch before block 0's end, which sums their slabs (with 8 storage
    # buffers, medium's on their own tile, where they need no split-K scratch), then the embedding's
    # backward and AdamW
    head = {"medium": 2, "large": 1, "xl": 1, "huge": 2, "massive": 1}
    for name in head:
        L = presets[name]["nLayer"]
        forward = 2 + 5 * L if name == "medium" else 2 + 7 * L
        assert counts[name]["step"] == forward + 1 + head[name] + 1 + 8 * L + 1 + 2, name


def counts(*args):
    r = subprocess.run(["node", str(ROOT / "bench/webgpu/dispatch_counts.mjs"), *args], capture_output=True, text=True,
                       timeout=120, check=True)
    return json.loads(r.stdout)


def test_a_device_with_ten_storage_buffers_ends_each_block_in_ln1s_backward():
    """Where the device binds 10 storage buffers (browsers commonly offer 10, GPUs in Node up to 16), ln1's
    backward input and the block's end are one dispatch at every preset: one fewer a block. Medium's deferred
    weight gradients then take their 64×64w group, which splits K and binds the split-K scratch as a 9th
    buffer; block 0's end sums the slabs, so that costs no dispatch. From xl up, whose group does not split K,
    the group binds the head's logits gradient and ln_f's output too: the head's weight gradient joins it, and
    cross-entropy's backward and the head's products (a pair, or at huge two apart) become the head's input
    gradient with cross-entropy as its prologue."""
    default, ten = counts("all"), counts("all", "10")
    presets = json.loads((ROOT / "site/static/presets.json").read_text())["presets"]
    head_joins = {"xl": 1, "huge": 2, "massive": 1, "mega": 1}
    for name, c in presets.items():
        print(f"{name}: {default[name]['step']} dispatches a step with 8 storage buffers, {ten[name]['step']} with 10")
        assert ten[name]["step"] == default[name]["step"] - c["nLayer"] - head_joins.get(name, 0), name
        assert (ten[name]["eval"], ten[name]["decode"]) == (default[name]["eval"], default[name]["decode"])


def test_a_device_with_more_workgroup_memory_runs_big_twin_tile_pairs_apart():
    """With 10 storage buffers and 32 KiB of workgroup memory (common in browsers; an H100's 48 KiB gives
    the same plans), a Linear's two backward products run apart where the weight gradient would pair only
    on its tile's twin and has over 100,000 outputs: large's fc_in and fc_out (two more a block),
    massive's and mega's q/k/v (one more a block). Every other preset pairs as before
    (docs/lab/2026-11-27-wgsl-step-dispatch-costs.md §28)."""
    wide = counts("all", "10", "32768", "off")  # every Linear's weight gradient on the chain, with its input gradient
    for name, c in wide.items():
        print(f"{name}: {c['step']} dispatches a step with 10 storage buffers and 32 KiB of workgroup memory")
    paired_before = {"tiny": 31, "small": 43, "medium": 55, "large": 91, "xl": 119, "huge": 175, "massive": 203,
                     "mega": 203, "behemoth": 417}
    apart = {"large": 2 * 6, "massive": 14, "mega": 14}
    assert {name: c["step"] for name, c in wide.items()} == {
        name: n + apart.get(name, 0) for name, n in paired_before.items()}


def test_deferred_weight_gradients_run_in_one_dispatch_and_leave_no_pair():
    """With 10 storage buffers (a browser's; 32 KiB of workgroup memory gives the same plans as an H100's
    48): from medium up, where the trainer defers the weight gradients, a block's backward is 7 dispatches
    instead of the paired plans' 7 to 9, and the end of the backward has the weight gradients batched over
    the blocks in one dispatch on 64×64w, recorded before block 0's end, which sums their split-K slabs (at
    medium split 4 ways, at large 2); tiny and small keep their pairs
    (docs/lab/2026-11-27-wgsl-step-deferred-weight-gradients.md §31–32).
    Where the group binds the head's logits gradient and ln_f's output too (11 buffers with the split-K
    scratch: the H100's 16; 10 from xl up, whose group does not split K), the head's weight gradient joins
    it: cross-entropy becomes the prologue of the head's input gradient, one dispatch where it and the
    head's pair were two (§34)."""
    deferred, kept = counts("all", "10", "32768"), counts("all", "10", "32768", "off")
    h100 = counts("all", "16", "32768")
    for name in deferred:
        print(f"{name}: {deferred[name]['step']} dispatches a step with the rule's deferral, "
              f"{kept[name]['step']} without, {h100[name]['step']} with 16 storage buffers")
    assert {name: c["step"] for name, c in deferred.items()} == {
        "tiny": 31, "small": 43, "medium": 56, "large": 92, "xl": 119, "huge": 175, "massive": 203, "mega": 203,
        "behemoth": 417}
    assert {name: c["step"] for name, c in h100.items()} == {
        **{name: c["step"] for name, c in deferred.items()}, "medium": 55, "large": 91}
    assert all(deferred[name]["step"] == kept[name]["step"] for name in ("tiny", "small", "behemoth"))
