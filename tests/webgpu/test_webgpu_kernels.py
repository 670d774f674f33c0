"""Each WGSL kernel family against a float64 reference (numpy / PyTorch autograd) on awkward shapes.

Headless Chromium's WebGPU on SwiftShader, a software adapter: correctness only. One page runs
every case (tests/webgpu/hosts/kernel_cases.js); each check prints its max error and tolerance. The same page
then compiles every WGSL variant the trainer can use into a shader module (no pipeline: see that test).
"""
import json
import math
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import ROOT
from support.browser_host import BrowserHost, b64, from_b64


rng = np.random.default_rng(1234)
CASES = []  # (case dict, inputs {name: array}, check(outputs))


def f32(a):
    return np.ascontiguousarray(a, dtype=np.float32)


def add_case(case, inputs, check, subgroups=False):
    """subgroups: run the case's kernels at the subgroup width the page's device probed (webgpu/subgroups.js),
    which must be more than one; otherwise without subgroups (the kernels' fallback)."""
    case["id"] = f"c{len(CASES)}"
    if subgroups:
        case["subgroups"] = True
        plain_check = check

        def check(out):
            width = int(out["width"][0])
            print(f"with subgroups of {width} invocations")
            assert width > 1, "the page's device has no subgroups (probe: adapterInfo's subgroups)"
            plain_check(out)
    CASES.append((case, {f"{case['id']}_{k}": v for k, v in inputs.items()}, check))


def report(name, got, ref, tol):
    err = float(np.max(np.abs(np.asarray(got, np.float64) - np.asarray(ref, np.float64)))) if np.size(ref) else 0.0
    print(f"{name}: max abs error {err:.3g} (tolerance {tol:.3g})")
    assert err <= tol, f"{name}: max abs error {err} > {tol}"
    return err


def kernel_label(tile):
    """How a product runs: on a matmul tile, or (no tile asked for, one row) as dot products (matvec.js)."""
    return f"tile {tile}" if tile else "as dot products"


# --- matmul: the three forms, every tile, bias / residual / accumulate / fused bias gradient, operand offsets
def matmul_case(form, M, N, K, tile, bias=False, residual=False, accumulate=False, splits=None, bias_grad=False,
                vec=None):
    """vec: operands placed for vec4 reads (offsets and contiguous extents multiples of 4), and
    the vec4 kernel asked for; otherwise odd offsets, so the scalar kernel."""
    a_off, b_off, bias_off = (4, 8, 3) if vec else (5, 7, 3)
    a = rng.standard_normal((K, M) if form == "backward_weight" else (M, K))
    b = rng.standard_normal((N, K) if form == "forward" else (K, N))
    ref = ((a.T if form == "backward_weight" else a) @ (b.T if form == "forward" else b)).ravel()
    inputs = {"A": f32(np.concatenate([np.zeros(a_off), a.ravel()])),
              "B": f32(np.concatenate([np.zeros(b_off), b.ravel()]))}
    if bias:
        bv = rng.standard_normal(N)
        inputs["bias"] = f32(np.concatenate([np.zeros(bias_off), bv]))
        ref = ref + np.tile(bv, M)
    if residual:
        r = rng.standard_normal((M, N))
        inputs["R"] = f32(r)
        ref = ref + r.ravel()
    if accumulate:
        c0 = rng.standard_normal((M, N))
        inputs["C0"] = f32(c0)
        ref = ref + c0.ravel()
    if bias_grad:  # the Linear's bias gradient Σ_k A[k, m], stored right after the M·N weight gradients
        ref = np.concatenate([ref, a.sum(0)])
    name = (f"matmul {form} {M}x{N}x{K} {kernel_label(tile)}{' +bias' if bias else ''}"
            f"{' +residual' if residual else ''}"
            f"{' +=' if accumulate else ''}{' +bias-grad' if bias_grad else ''}"
            f"{f' split-K {splits}' if splits else ''}{' vec4' if vec else ''}")
    tol = 2e-6 * K * math.sqrt(K)
    add_case(dict(op="matmul", form=form, M=M, N=N, K=K, tile=tile, aOff=a_off, bOff=b_off, biasOff=bias_off,
                  bias=bias, residual=residual, accumulate=accumulate, splits=splits, biasGrad=bias_grad, vec=vec),
             inputs,
             lambda out: report(name, out["C"], ref, tol))


TILES = ("64x64w", "64x64", "64x32", "32x64", "32x32", "32x32-s2", "128x128")
for i, form in enumerate(("forward", "backward_input", "backward_weight")):
    matmul_case(form, 37, 53, 29, TILES[i], bias=True)
    matmul_case(form, 130, 67, 150, TILES[i + 3], residual=True)
    matmul_case(form, 67, 130, 21, TILES[(i + 1) % 6], accumulate=True)
matmul_case("forward", 1, 256, 48, "32x32")  # a decode step's logits
matmul_case("backward_weight", 37, 53, 150, "64x64", bias=True, splits=3)  # split-K: chunks of 64, 64, 22
matmul_case("backward_weight", 70, 130, 300, "64x64w", accumulate=True, residual=True, splits=5)
matmul_case("backward_weight", 45, 37, 130, "32x32", bias_grad=True)
matmul_case("backward_weight", 70, 33, 301, "32x64", bias_grad=True, splits=4)
matmul_case("backward_input", 150, 140, 37, "128x128", bias=True, accumulate=True)
for i, form in enumerate(("forward", "backward_input", "backward_weight")):  # the 256-invocation tiles
    matmul_case(form, 130, 67, 150, ("32x32w-k32", "64x64w", "128x128")[i], bias=form != "backward_weight",
                residual=True)
    matmul_case(form, 37, 140, 29, ("64x64w", "128x128", "32x32w-k32")[i], accumulate=True)
# vec4 reads of A and B, every form on every tile (68 rows, 44 of K: partial tiles and K-steps)
ALL_TILES = ("128x128", "64x64", "64x32", "32x64", "32x32", "64x64w", "32x32w-k32", "64x32-k32", "32x64-k32",
             "32x32-s2", "32x32-s4", "128x128-k16")
for i, form in enumerate(("forward", "backward_input", "backward_weight")):
    for j, tile in enumerate(ALL_TILES):
        matmul_case(form, 68, 132, 44, tile, vec=True, bias=(i + j) % 2 == 0 and form != "backward_weight",
                    residual=(i + j) % 3 == 0, accumulate=(i + j) % 3 == 1)
matmul_case("backward_weight", 36, 52, 300, "32x32-s2", bias_grad=True, splits=3, vec=True)
for i, form in enumerate(("forward", "backward_input", "backward_weight")):  # 32-deep K-steps, scalar reads
    matmul_case(form, 37, 53, 70, ("32x32w-k32", "32x64-k32")[i % 2], bias=form != "backward_weight", residual=True)
matmul_case("backward_weight", 45, 37, 301, "32x32w-k32", bias_grad=True, splits=4)
for i, form in enumerate(("forward", "backward_input", "backward_weight")):  # 4×4 each, 32-deep K-steps, scalar
    matmul_case(form, 70, 37, 75, ("64x32-k32", "32x64-k32")[i % 2], bias=form != "backward_weight", accumulate=True)
matmul_case("backward_weight", 68, 132, 300, "64x32-k32", bias_grad=True, splits=3, vec=True)
matmul_case("backward_weight", 68, 132, 300, "64x64w", bias_grad=True, splits=5, vec=True)
matmul_case("forward", 1, 256, 48, "32x32w-k32", bias=True, vec=True)  # a decode step's logits
# sliced K: scalar reads; K past one slab and ending inside a group's rows; a fused bias gradient
# whose sums group 0 adds too; split-K of a sliced tile
for i, form in enumerate(("forward", "backward_input", "backward_weight")):
    matmul_case(form, 70, 37, 75, ("32x32-s4", "32x32-s2", "32x32-s4")[i], bias=form != "backward_weight",
                residual=True)
    matmul_case(form, 37, 70, 45, ("32x32-s2", "32x32-s4", "32x32-s2")[i], accumulate=True)
matmul_case("backward_weight", 45, 37, 130, "32x32-s4", bias_grad=True)
matmul_case("backward_weight", 68, 132, 300, "32x32-s4", bias_grad=True, splits=3, vec=True)
matmul_case("backward_weight", 45, 37, 301, "32x32-s4", bias_grad=True, splits=4)
matmul_case("forward", 150, 140, 37, "128x128-k16", bias=True, residual=True)  # past 16 KiB of workgroup memory
# one row and no tile asked for: a dot product per output (matvec.js), as a decoded token's products
matmul_case("forward", 1, 70, 37, None, bias=True, residual=True)  # scalar: odd offsets, N past 8 columns a workgroup
matmul_case("forward", 1, 256, 48, None, bias=True, accumulate=True, vec=True)
matmul_case("forward", 1, 132, 1540, None, residual=True, vec=True)  # K of 12 strides of a lane, and a part


def batched_matmul_case(form, M, N, K, n, tile, bias=False, splits=None, bias_grad=False, kcat=False, vec=None):
    """n products in one dispatch (operand i at offset + i·stride, strides with slack), or with
    kcat their sum into one C; vec: slack that keeps each operand on a multiple of 4 floats."""
    a_shape, b_shape = ((K, M) if form == "backward_weight" else (M, K)), ((N, K) if form == "forward" else (K, N))
    a_zs, b_zs = int(np.prod(a_shape)) + (4 if vec else 3), int(np.prod(b_shape)) + (8 if vec else 5)
    a = [rng.standard_normal(a_shape) for _ in range(n)]
    b = [rng.standard_normal(b_shape) for _ in range(n)]
    def flat(mats, zs):
        return f32(np.concatenate([np.concatenate([m.ravel(), np.zeros(zs - m.size)]) for m in mats]))
    prods = [(x.T if form == "backward_weight" else x) @ (y.T if form == "forward" else y) for x, y in zip(a, b)]
    inputs = {"A": flat(a, a_zs), "B": flat(b, b_zs)}
    strides = {"a": a_zs, "b": b_zs}
    if kcat:
        ref, c_len = sum(prods).ravel(), M * N
    else:
        length = M * N + (M if bias_grad else 0)
        c_zs = length + (8 if vec else 7)  # vec: C's runs of 4 outputs start on multiples of 4 floats
        outs = [p.ravel() for p in prods]
        if bias:
            bv = [rng.standard_normal(N) for _ in range(n)]
            inputs["bias"] = flat(bv, N + 2)
            strides["bias"] = N + 2
            outs = [o + np.tile(v, M) for o, v in zip(outs, bv)]
        if bias_grad:
            outs = [np.concatenate([o, x.sum(0)]) for o, x in zip(outs, a)]
        c_len = n * c_zs
        ref = np.full(c_len, np.nan)
        for i, o in enumerate(outs):
            ref[i * c_zs:i * c_zs + length] = o
        strides["c"] = c_zs
    keep = ~np.isnan(ref)
    name = (f"matmul {form} {M}x{N}x{K} tile {tile} {'kcat' if kcat else 'batches'} {n}{' +bias' if bias else ''}"
            f"{' +bias-grad' if bias_grad else ''}{f' split-K {splits}' if splits else ''}{' vec4' if vec else ''}")
    tol = 2e-6 * n * K * math.sqrt(n * K)
    add_case(dict(op="matmul", form=form, M=M, N=N, K=K, tile=tile, aOff=0, bOff=0, biasOff=0, bias=bias, splits=splits,
                  biasGrad=bias_grad, batches=1 if kcat else n, kcat=n if kcat else 1, strides=strides, cLen=c_len,
                  vec=vec),
             inputs,
             lambda out: report(name, np.asarray(out["C"])[keep], ref[keep], tol))


batched_matmul_case("forward", 70, 37, 29, 3, "32x32w-k32", bias=True)  # the q, k, v projections
# their weight and bias gradients
batched_matmul_case("backward_weight", 37, 29, 130, 3, "32x64", bias_grad=True, splits=3)
batched_matmul_case("backward_weight", 20, 33, 70, 3, "32x32", bias_grad=True)
batched_matmul_case("backward_input", 70, 37, 29, 3, "32x32w-k32", kcat=True)  # their input gradient
batched_matmul_case("backward_input", 45, 21, 40, 3, "32x64", kcat=True, splits=2)
batched_matmul_case("forward", 68, 36, 28, 3, "64x64w", bias=True, vec=True)
batched_matmul_case("backward_weight", 36, 28, 132, 3, "64x64w", bias_grad=True, splits=3, vec=True)
batched_matmul_case("backward_input", 68, 36, 28, 3, "128x128", kcat=True, vec=True)
batched_matmul_case("backward_input", 44, 20, 40, 3, "64x64w", kcat=True, splits=2, vec=True)
batched_matmul_case("forward", 68, 36, 28, 3, "32x32-s4", bias=True, vec=True)
batched_matmul_case("backward_input", 68, 36, 52, 3, "32x32-s2", kcat=True, vec=True)


def matmul_group_case(tile, products, vec):
    """Weight gradients dW = Aᵀ·B (+ db), each batched, in one dispatch (the trainer's deferred ones):
    products [(M, N, K, batches, splits, a, b)], product p reading its batches from A input a and B input b
    after the regions of the products before it there, writing C after the product before it; the split ones
    leave slabs that a final sum adds. vec: every size a multiple of 4 floats."""
    pad = 4 if vec else 3
    a_len, b_len, c_len, partials_len, specs, refs = [0, 0], [0, 0], 0, 0, [], []
    regions = {"A": [[], []], "B": [[], []]}
    for M, N, K, batches, splits, a, b in products:
        xs = [rng.standard_normal((K, M)) for _ in range(batches)]
        ys = [rng.standard_normal((K, N)) for _ in range(batches)]
        a_zs, b_zs, c_zs = K * M + pad, K * N + pad, M * N + M + pad
        specs.append(dict(M=M, N=N, K=K, batches=batches, splits=splits, a=a, b=b, aOff=a_len[a], bOff=b_len[b],
                          cOff=c_len, strides={"a": a_zs, "b": b_zs, "c": c_zs}, partialsOff=partials_len))
        regions["A"][a].append((a_len[a], xs, a_zs))
        regions["B"][b].append((b_len[b], ys, b_zs))
        refs += [(c_len + i * c_zs, np.concatenate([(x.T @ y).ravel(), x.sum(0)]))
                 for i, (x, y) in enumerate(zip(xs, ys))]
        a_len[a], b_len[b], c_len = a_len[a] + batches * a_zs, b_len[b] + batches * b_zs, c_len + batches * c_zs
        partials_len += -(-batches * splits * (M * N + M) // 64) * 64 if splits > 1 else 0
    inputs = {}
    for X, lengths in (("A", a_len), ("B", b_len)):
        for j, length in enumerate(lengths):
            flat = np.zeros(max(length, 4))
            for off, mats, zs in regions[X][j]:
                for i, m in enumerate(mats):
                    flat[off + i * zs:off + i * zs + m.size] = m.ravel()
            inputs[f"{X}{j}"] = f32(flat)
    ref = np.full(c_len, np.nan)
    for off, out in refs:
        ref[off:off + out.size] = out
    keep = ~np.isnan(ref)
    K = max(p[2] for p in products)
    name = f"{len(products)} batched weight gradients in one dispatch, tile {tile}{' vec4' if vec else ''}"
    add_case(dict(op="matmul_group", tile=tile, products=specs, aInputs=["A0", "A1"], bInputs=["B0", "B1"], cLen=c_len,
                  partialsLen=max(partials_len, 16)),
             inputs, lambda out: report(name, np.asarray(out["C"])[keep], ref[keep], 8e-6 * K * math.sqrt(K)))


# the trainer's tile, one product split; and scalar reads of odd sizes on the wide tile, two split
matmul_group_case("32x32-s2", [(20, 36, 70, 2, 1, 0, 0), (36, 20, 70, 3, 2, 1, 1), (20, 20, 70, 2, 1, 0, 1)], vec=True)
matmul_group_case("64x64w", [(21, 37, 90, 2, 3, 0, 1), (37, 21, 90, 2, 1, 1, 0), (21, 21, 90, 3, 2, 1, 1)], vec=False)


# --- layernorm forward + backward (dx added onto an existing gradient, as in the residual stream;
# apart: the sum written after it, the trainer keeping each stage of that gradient)
def layernorm_case(rows, C, subgroups=False, apart=False):
    eps = 1e-5
    w_off, b_off, n_params = 11, 11 + C, 11 + 2 * C + 9  # bias gradient right after the weight's, as in the manifest
    x = torch.tensor(rng.standard_normal((rows, C)) * 2 + 0.5, dtype=torch.float64, requires_grad=True)
    w = torch.tensor(rng.standard_normal(C), dtype=torch.float64, requires_grad=True)
    b = torch.tensor(rng.standard_normal(C), dtype=torch.float64, requires_grad=True)
    dout = rng.standard_normal((rows, C))
    dx0 = rng.standard_normal((rows, C))
    out = F.layer_norm(x, (C,), w, b, eps)
    out.backward(torch.tensor(dout))
    params = np.zeros(n_params)
    params[w_off:w_off + C] = w.detach().numpy()
    params[b_off:b_off + C] = b.detach().numpy()
    xd = x.detach().numpy()
    mean, rstd = xd.mean(1), 1 / np.sqrt(xd.var(1) + eps)

    def check(o):
        report(f"layernorm forward {rows}x{C}", o["out"], out.detach().numpy().ravel(), 1e-5)
        report(f"layernorm mean/rstd {rows}x{C}", o["stats"], np.stack([mean, rstd], 1).ravel(), 1e-5)
        dx = (x.grad.numpy() + dx0).ravel()
        report(f"layernorm dx {rows}x{C}{' apart' if apart else ''}", o["dx"],
               np.concatenate([f32(dx0).ravel(), dx]) if apart else dx, 1e-5)
        report(f"layernorm dweight {rows}x{C}", o["grads"][w_off:w_off + C], w.grad.numpy(), 1e-4)
        report(f"layernorm dbias {rows}x{C}", o["grads"][b_off:b_off + C], b.grad.numpy(), 1e-4)

    add_case(dict(op="layernorm", rows=rows, C=C, eps=eps, wOff=w_off, bOff=b_off, nParams=n_params, apart=apart),
             {"x": f32(xd), "params": f32(params), "dout": f32(dout),
              "dx0": f32(np.concatenate([dx0, np.zeros_like(dx0)]) if apart else dx0)}, check, subgroups)


layernorm_case(130, 50)  # three chunks of the two-pass parameter-gradient reduction
layernorm_case(5, 200)
layernorm_case(67, 333)  # rows not a multiple of a workgroup's, C past 256 and not a multiple of 32
# the same with subgroups: runs of lanes add by shuffles, then meet (32 and 64 lanes a row)
layernorm_case(130, 50, subgroups=True)
layernorm_case(67, 333, subgroups=True)
layernorm_case(67, 50, apart=True)


def layernorm_summed_case(rows, C, K, splits, tile, subgroups=False):
    """Split-K products whose slabs the LayerNorm reading them sums (the trainer's fc_out -> LayerNorm,
    input gradients -> LayerNorm backward): x = G·Wᵀ + bias + R, its LayerNorm; dout = dH·W2, dx (+)= its
    LayerNorm backward. x and dout are also stored where the unsplit products would have put them."""
    eps = 1e-5
    bias_off, w_off, b_off, n_params = 3, 3 + C, 3 + 2 * C, 3 + 3 * C + 5
    g, wt, r = rng.standard_normal((rows, K)), rng.standard_normal((C, K)) / 4, rng.standard_normal((rows, C))
    dh, w2, dx0 = rng.standard_normal((rows, K)), rng.standard_normal((K, C)) / 4, rng.standard_normal((rows, C))
    params = rng.standard_normal(n_params)
    p64 = f32(params).astype(np.float64)  # what the kernels read, in float64

    def f64(a):
        return f32(a).astype(np.float64)

    x = torch.tensor(f64(g) @ f64(wt).T + p64[bias_off:bias_off + C] + f64(r), requires_grad=True)
    dout = f64(dh) @ f64(w2)
    out = F.layer_norm(x, (C,), torch.tensor(p64[w_off:w_off + C]), torch.tensor(p64[b_off:b_off + C]), eps)
    out.backward(torch.tensor(dout))
    xd = x.detach().numpy()
    name = f"LayerNorm summing {splits} split-K slabs {rows}x{C}x{K} tile {tile}"

    def check(o):
        report(f"{name}: x", o["x"], xd.ravel(), 1e-4)
        report(f"{name}: forward", o["out"], out.detach().numpy().ravel(), 1e-4)
        report(f"{name}: mean/rstd", o["stats"], np.stack([xd.mean(1), 1 / np.sqrt(xd.var(1) + eps)], 1).ravel(), 1e-4)
        report(f"{name}: dout", o["dout"], dout.ravel(), 1e-4)
        report(f"{name}: dx", o["dx"], (x.grad.numpy() + dx0).ravel(), 1e-4)

    add_case(dict(op="layernorm_summed", rows=rows, C=C, K=K, splits=splits, tile=tile, eps=eps, biasOff=bias_off,
                  wOff=w_off, bOff=b_off),
             {"G": f32(g), "W": f32(wt), "R": f32(r), "dH": f32(dh), "W2": f32(w2), "params": f32(params),
              "dx0": f32(dx0)}, check, subgroups)


layernorm_summed_case(70, 44, 150, 3, "64x64w")  # 32 lanes a row; the last workgroup's rows past the end
layernorm_summed_case(37, 200, 96, 2, "32x32-s2")  # 64 lanes a row, scalar reads, a sliced tile
layernorm_summed_case(70, 44, 150, 3, "64x64w", subgroups=True)


def split_weight_gradients(products, inputs, c_off, gap):
    """Split-K weight gradients dW = Aᵀ·B (+ db) of products [(M, N, K, tile, splits, bias_grad)], each into
    its own stretch of one buffer from c_off on, `gap` floats apart: their inputs (added to `inputs`), the
    ops' specs, references [(offset, values, tolerance)] and where the buffer ends."""
    specs, refs = [], []
    for i, (M, N, K, tile, splits, bias_grad) in enumerate(products):
        a, b = rng.standard_normal((K, M)), rng.standard_normal((K, N))
        out = np.concatenate([(a.T @ b).ravel(), a.sum(0) if bias_grad else []])
        inputs[f"A{i}"], inputs[f"B{i}"] = f32(a), f32(b)
        refs.append((c_off, out, 2e-6 * K * math.sqrt(K)))
        specs.append(dict(M=M, N=N, K=K, tile=tile, splits=splits, biasGrad=bias_grad, cOff=c_off))
        c_off += out.size + gap
    return specs, refs, c_off


def layernorm_params_case(rows, C, products=(), subgroups=False, merge=None, slabs=0, apart=False):
    """A block's two LayerNorms' weight and bias gradients in one dispatch; products: [(M, N, K, tile,
    splits, bias_grad)], split-K weight gradients into the same gradient buffer (after the LayerNorms'),
    whose final sums that dispatch takes too (a block's end). merge (True, False): with the second
    LayerNorm's input gradient (ln1's), added to dx, in the same dispatch or before it; slabs: the
    second's dout is then a product dH·W2 (K = 150) left in that many split-K slabs; apart: dx0 + that
    gradient is written after dx0, which stays."""
    w_offs, n_params = [4, 4 + 2 * C + 7], 4 + 4 * C + 7 + 3
    inputs, ref = {}, np.zeros(n_params)
    for j, w_off in enumerate(w_offs):
        x = rng.standard_normal((rows, C)) * 2 + 0.5
        mean, rstd = x.mean(1), 1 / np.sqrt(x.var(1) + 1e-5)
        dout = rng.standard_normal((rows, C))
        if j == 1 and slabs:
            dh, w2 = f32(rng.standard_normal((rows, 150))), f32(rng.standard_normal((150, C)) / 4)
            dout = dh.astype(np.float64) @ w2.astype(np.float64)
            inputs.update({"dH": dh, "W2": w2})
        xhat = (f32(x) - f32(mean)[:, None]) * f32(rstd)[:, None]
        ref[w_off:w_off + C] = (dout * xhat).sum(0)
        ref[w_off + C:w_off + 2 * C] = dout.sum(0)
        inputs.update({f"x{j}": f32(x), f"dout{j}": f32(dout), f"stats{j}": f32(np.stack([mean, rstd], 1))})
    if merge is not None:  # dx0 + LayerNorm's input gradient, from the same x̂ and stats
        weight = rng.standard_normal(C)
        params = np.zeros(w_offs[1] + C)
        params[w_offs[1]:] = weight
        dn = (dout if slabs else inputs["dout1"].astype(np.float64)) * weight
        dx0 = rng.standard_normal((rows, C))
        ref_dx = dx0 + (dn - dn.mean(1, keepdims=True) - xhat * (dn * xhat).mean(1, keepdims=True)) * f32(rstd)[:, None]
        inputs.update({"params": f32(params), "dx0": f32(np.concatenate([dx0, np.zeros_like(dx0)]) if apart else dx0)})
        if apart:
            ref_dx = np.concatenate([f32(dx0), ref_dx])
    specs, product_refs, c_off = split_weight_gradients(products, inputs, n_params + 5, 11)
    name = f"layernorm parameter gradients of two LayerNorms {rows}x{C}"
    if merge is not None:
        name += f", the second's input gradient {'in the same dispatch' if merge else 'in one before'}"
        name += f" from {slabs} slabs" if slabs else ""
        name += ", written apart" if apart else ""

    def check(o):
        report(name, o["grads"][:n_params], ref, 1e-4)
        for j, (off, out, tol) in enumerate(product_refs):
            got = np.asarray(o["grads"])[off:off + out.size]
            report(f"{name}: split-K product {j}'s sums in the same dispatch", got, out, tol)
        if merge is not None:
            report(f"{name}: dx", o["dx"], ref_dx.ravel(), 1e-4)  # kernel_cases.js checks the dispatches
            report(f"{name}: the second's dout", o["dout1"], dout.ravel() if slabs else inputs["dout1"].ravel(), 1e-4)

    add_case(dict(op="layernorm_params", rows=rows, C=C, wOffs=w_offs, nParams=c_off, products=specs,
                  **({} if merge is None else {"merge": merge, "slabs": slabs, "K": 150, "apart": apart})),
             inputs, check, subgroups)


layernorm_params_case(130, 50)
layernorm_params_case(67, 333)
# a block's end: q/k/v's (3 batches in the trainer; here one), o_proj's, fc_in's and fc_out's, the head's
layernorm_params_case(150, 40, [(40, 120, 150, "32x32-s2", 3, True), (120, 40, 150, "64x64w", 2, True),
                                (40, 40, 150, "32x32", 4, False), (45, 37, 130, "64x64", 2, True),
                                (250, 40, 150, "32x64", 3, False)])
layernorm_params_case(67, 333, subgroups=True)
layernorm_params_case(150, 40, [(40, 120, 150, "32x32-s2", 3, True), (40, 40, 150, "32x32", 4, False)], subgroups=True)
# ln1's backward and the block's end: in one dispatch (devices that bind 10 storage buffers), or two
for merge in (True, False):
    layernorm_params_case(150, 40, [(40, 120, 150, "32x32-s2", 3, True), (45, 37, 130, "64x64", 2, True)], merge=merge)
# deferred weight gradients (medium up): block 0's end sums the six kinds' slabs, as many as a dispatch takes
layernorm_params_case(150, 40, [(40, 120, 150, "64x64w", 4, True), (120, 40, 150, "64x64w", 4, True),
                                (40, 40, 150, "64x64w", 3, True), (40, 40, 150, "64x64w", 2, True),
                                (40, 40, 150, "64x64w", 4, True), (40, 40, 150, "64x64w", 2, True)], merge=True)
layernorm_params_case(67, 333, merge=True)  # 64 lanes a row, no sums
layernorm_params_case(67, 40, merge=True, apart=True)
layernorm_params_case(150, 40, [(40, 40, 150, "32x32", 4, False)], subgroups=True, merge=True)
# the second's dout in split-K slabs (large and up: q/k/v's input gradient), with and without the sums
for merge in (True, False):
    layernorm_params_case(150, 40, [(40, 120, 150, "32x32-s2", 3, True), (40, 40, 150, "32x32", 4, False)], merge=merge,
                          slabs=3)
layernorm_params_case(67, 333, merge=True, slabs=2)
layernorm_params_case(150, 40, [(40, 40, 150, "32x32", 4, False)], subgroups=True, merge=True, slabs=2)


# --- LayerNorm as a forward product's prologue: C = LayerNorm(x)·Wᵀ (+ bias), the LayerNorm's output and
# statistics stored for the backward (the trainer's ln1 -> q/k/v, ln2 -> fc_in, ln_f -> head)
def layernorm_matmul_case(M, N, K, tile, vec, batches=1, first=0, bias=False, gelu=False):
    """first: rows of x before the product's (its A offset: the head's last rows when generating)."""
    eps = 1e-5
    w_off, lb_off = (4, 4 + K) if vec else (3, 3 + K)  # the LayerNorm's weight and bias, then W
    b_off = lb_off + K + (4 if vec else 1)  # an odd offset: the scalar kernel
    x = rng.standard_normal((first + M, K)) * 2 + 3  # |mean| > std, as in a residual stream
    g, beta = rng.standard_normal(K), rng.standard_normal(K)
    mean, rstd = x.mean(1), 1 / np.sqrt(x.var(1) + eps)
    y = (x - mean[:, None]) * rstd[:, None] * g + beta
    w = rng.standard_normal((batches, N, K))
    params = np.zeros(b_off + batches * N * K)
    params[b_off:] = w.ravel()
    params[w_off:w_off + K], params[lb_off:lb_off + K] = g, beta
    ref = np.concatenate([y[first:] @ w[i].T for i in range(batches)], 1)  # (M, batches·N): batch i in C's columns
    inputs = {"A": f32(x), "B": f32(params)}
    if bias:
        bv = rng.standard_normal((batches, N))
        inputs["bias"] = f32(bv)
        ref = ref + bv.reshape(1, -1)
    ref = np.concatenate([ref[:, i * N:(i + 1) * N].ravel() for i in range(batches)])
    name = (f"matmul forward {M}x{N}x{K} {kernel_label(tile)} LayerNorm prologue"
            f"{' vec4' if vec else ''}"
            f"{f' batches {batches}' if batches > 1 else ''}{f' rows from {first}' if first else ''}"
            f"{' +bias' if bias else ''}{' gelu' if gelu else ''}")
    tol = 2e-6 * K * math.sqrt(K) * 4

    def check(o):
        report(f"{name}: product", o["C"], ref, tol)
        if gelu:
            report(f"{name}: gelu(h) of the h stored", o["G"], gelu64(np.float32(o["C"])), 2e-6)
        report(f"{name}: LayerNorm output", o["LN"][first * K:], y[first:].ravel(), 1e-5)
        report(f"{name}: mean/rstd", o["LNS"][2 * first:], np.stack([mean, rstd], 1)[first:].ravel(), 1e-5)

    add_case(dict(op="matmul", form="forward", M=M, N=N, K=K, tile=tile, aOff=first * K, bOff=b_off, biasOff=0,
                  bias=bias, gelu=gelu, batches=batches, vec=vec, cLen=batches * M * N,
                  strides={"b": N * K, "c": M * N, "bias": N} if batches > 1 else {},
                  ln={"wOff": w_off, "bOff": lb_off, "eps": eps}),
             inputs, check)


for i, tile in enumerate(("32x32w-k32", "32x32", "64x64w", "128x128", "64x32-k32", "32x64-k32", "32x32-s4",
                          "128x128-k16")):
    layernorm_matmul_case(70, 44, 36, tile, vec=True, bias=i % 2 == 0)
    layernorm_matmul_case(37, 21, 30, tile, vec=False)
layernorm_matmul_case(68, 20, 48, "32x32", vec=True, batches=3, bias=True)  # q, k, v from ln1
layernorm_matmul_case(66, 132, 24, "32x32w-k32", vec=True, bias=True, gelu=True)  # fc_in from ln2
layernorm_matmul_case(68, 20, 48, "32x64-k32", vec=True, batches=3, bias=True)  # medium's q, k, v
layernorm_matmul_case(66, 132, 24, "32x64-k32", vec=True, bias=True, gelu=True)  # small's and medium's fc_in
layernorm_matmul_case(1, 70, 48, "32x32w-k32", vec=True, first=5)  # a decode step's logits from ln_f
layernorm_matmul_case(9, 33, 200, "32x32", vec=False, first=3)
# a decoded token's products as dot products (matvec.js): ln_f -> logits, ln1 -> q, k, v, ln2 -> fc_in
layernorm_matmul_case(1, 70, 48, None, vec=True, first=5)
layernorm_matmul_case(1, 33, 600, None, vec=False, first=3)  # a row past the 256 invocations' first stride
layernorm_matmul_case(1, 20, 48, None, vec=True, batches=3, bias=True)
layernorm_matmul_case(1, 132, 24, None, vec=True, bias=True, gelu=True)


# --- GELU (tanh form), fused into the products around it: fc_in's forward writes h and gelu(h), fc_out's
# input gradient is multiplied by gelu'(h) as it is stored
def gelu64(h):
    return F.gelu(torch.tensor(h, dtype=torch.float64), approximate="tanh").numpy()


def gelu_grad64(h):
    x = torch.tensor(h, dtype=torch.float64, requires_grad=True)
    F.gelu(x, approximate="tanh").sum().backward()
    return x.grad.numpy()


def gelu_matmul_case(form, M, N, K, tile):
    a = rng.standard_normal((M, K)) * 0.7
    b = rng.standard_normal((N, K) if form == "forward" else (K, N)) * 0.7
    prod = (a @ (b.T if form == "forward" else b)).ravel()
    tol = 2e-6 * K * math.sqrt(K)
    inputs = {"A": f32(a), "B": f32(b)}
    if form == "forward":  # h = a·bᵀ + bias, spread over GELU's range (its tanh clamps past ±10)
        bias = rng.standard_normal(N) * 4
        inputs["bias"] = f32(bias)
        h = prod + np.tile(bias, M)
        name = f"matmul forward {M}x{N}x{K} {kernel_label(tile)} +bias, gelu epilogue"
        case = dict(bias=True, gelu=True)

        def check(o):
            report(f"{name}: h", o["C"], h, tol)
            report(f"{name}: gelu(h) of the h stored", o["G"], gelu64(np.float32(o["C"])), 2e-6)
            report(f"{name}: gelu(h)", o["G"], gelu64(h), 1.2 * tol + 2e-6)
    else:  # d h = (dY·W) · gelu'(h)
        hv = np.linspace(-12, 12, M * N) + rng.standard_normal(M * N) * 0.01
        inputs["H"] = f32(hv)
        ref = prod * gelu_grad64(np.float32(hv).astype(np.float64))
        name = f"matmul backward_input {M}x{N}x{K} tile {tile}, gelu' epilogue"
        case = dict(geluGrad=True)

        def check(o):
            report(name, o["C"], ref, 1.2 * tol + 1e-6 * float(np.max(np.abs(prod))))
    add_case(dict(op="matmul", form=form, M=M, N=N, K=K, tile=tile, aOff=0, bOff=0, biasOff=0, **case), inputs, check)


gelu_matmul_case("forward", 67, 130, 29, "32x64")
gelu_matmul_case("forward", 33, 70, 40, "32x32w-k32")
gelu_matmul_case("backward_input", 70, 37, 41, "32x32")
gelu_matmul_case("forward", 68, 132, 44, "64x64w")  # aligned: vec4 reads
gelu_matmul_case("backward_input", 68, 36, 44, "32x64")
gelu_matmul_case("forward", 68, 132, 44, "32x32-s4")
gelu_matmul_case("forward", 1, 130, 29, None)  # as dot products (matvec.js)
gelu_matmul_case("backward_input", 68, 36, 72, "32x32-s2")


def matmul_pair_case(R, n_out, n_in, splits, gelu=False, tiles=None, dx_splits=None):
    """A Linear's backward in one dispatch: dX = dY·W (· gelu'(H)) and dW = dYᵀ·X with db = Σ dY; dX split
    along K too where dx_splits is given (its slabs summed by a dispatch after the pair's)."""
    dy, w, x = rng.standard_normal((R, n_out)), rng.standard_normal((n_out, n_in)), rng.standard_normal((R, n_in))
    dx = dy @ w
    inputs = {"dY": f32(dy), "W": f32(w), "X": f32(x)}
    if gelu:
        h = rng.standard_normal((R, n_in)) * 3
        inputs["H"] = f32(h)
        dx = dx * gelu_grad64(np.float32(h).astype(np.float64))
    dw = np.concatenate([(dy.T @ x).ravel(), dy.sum(0)])
    name = (f"matmul pair R={R} {n_out}->{n_in} split-K {splits}{' gelu' if gelu else ''}"
            f"{f' tiles {tiles}' if tiles else ''}{f', dX split-K {dx_splits}' if dx_splits else ''}")

    def check(o):
        report(f"{name}: dX", o["dX"], dx.ravel(), 2.4e-6 * n_out * math.sqrt(n_out))
        report(f"{name}: dW, db", o["dW"], dw, 2e-6 * R * math.sqrt(R))

    add_case(dict(op="matmul_pair", R=R, Nout=n_out, Nin=n_in, splits=splits, gelu=gelu, tiles=tiles,
                  dxSplits=dx_splits), inputs, check)


matmul_pair_case(130, 37, 70, 3, gelu=True)
matmul_pair_case(70, 45, 33, 1, tiles=["64x64w", "128x128"])
matmul_pair_case(200, 29, 140, 4, tiles=["128x128", "32x32w-k32"])
matmul_pair_case(150, 300, 44, 3, tiles=["64x64w", "64x64w"], dx_splits=3)  # large up: fc_in's backward
matmul_pair_case(130, 36, 68, 3, gelu=True)  # vec4 reads (both widths multiples of 4)
matmul_pair_case(70, 44, 32, 1, tiles=["64x64w", "128x128"])
# tiles of as many invocations laid out differently: 16×8 beside 8×8 with K sliced in two; 16×16 beside
# 8×8×4 (each with its own workgroup arrays); both sliced (arrays shared)
matmul_pair_case(130, 36, 68, 2, gelu=True, tiles=["32x64-k32", "32x32-s2"])
matmul_pair_case(150, 300, 44, 3, tiles=["64x64w", "32x32-s4"], dx_splits=3)
matmul_pair_case(130, 37, 70, 4, tiles=["32x32-s2", "32x32-s2"])
matmul_pair_case(96, 36, 68, 2, gelu=True, tiles=["32x32-s2", "32x32-s2"])


# --- split-K weight gradients of several products, their final sums in one dispatch (a block's end)
def split_sums_case(products):
    """products: [(M, N, K, tile, splits, bias_grad)], each into its own stretch of one C, with gaps."""
    inputs = {}
    specs, ref, c_off = split_weight_gradients(products, inputs, 0, 13)
    name = f"matmul split-K sums of {len(products)} products in one dispatch"

    def check(o):
        for j, (off, out, tol) in enumerate(ref):
            report(f"{name}: product {j}", np.asarray(o["C"])[off:off + out.size], out, tol)

    add_case(dict(op="matmul_split_sums", products=specs, cLen=c_off), inputs, check)


split_sums_case([(37, 53, 150, "64x64", 3, True), (20, 33, 301, "32x64", 4, False), (45, 37, 130, "64x64", 2, True),
                 (16, 16, 200, "32x32", 5, True), (30, 20, 90, "32x32", 2, False), (9, 12, 70, "32x64", 3, True)])


# --- embedding forward (alone and in the first LayerNorm) + deterministic scatter-add backward, with ln_f's
# parameter gradients
def embedding_case(B, T, C, V=256, ctx=9, distinct=20, tail=2, head_splits=0):
    """tail: gradients after the embedding's and ln_f's, in the norm's partials only. head_splits: the
    tied head's weight gradient dlogitsᵀ·x is that many split-K slabs, which the token sums start from
    (instead of from the gradients there)."""
    rows = B * T
    wte_off, wpe_off = 3, 3 + V * C + 5
    lnf_off = wpe_off + ctx * C + 1  # ln_f's weight, then its bias
    n_params = lnf_off + 2 * C + tail
    params = rng.standard_normal(n_params)
    tokens = rng.integers(0, distinct, rows)  # few distinct tokens: many repeats to sum
    dres = rng.standard_normal((rows, C))
    grads0 = rng.standard_normal(n_params)
    wte = params[wte_off:wte_off + V * C].reshape(V, C)
    wpe = params[wpe_off:wpe_off + ctx * C].reshape(ctx, C)
    ref_out = wte[tokens] + wpe[np.arange(rows) % T]
    # the first LayerNorm's embedding, at positions past.. (ln_f's weights, for want of others)
    past, eps = ctx - T, 1e-5
    ref_embedded = wte[tokens] + wpe[past + np.arange(rows) % T]
    e_mean, e_rstd = ref_embedded.mean(1), 1 / np.sqrt(ref_embedded.var(1) + eps)
    ref_grads = grads0.copy()
    g_wte = ref_grads[wte_off:wte_off + V * C].reshape(V, C)
    head = {}
    if head_splits:
        head = {"head_dy": f32(rng.standard_normal((rows, V)) / rows), "head_x": f32(rng.standard_normal((rows, C)))}
        g_wte[:] = head["head_dy"].astype(np.float64).T @ head["head_x"]
    np.add.at(g_wte, tokens, dres)
    ref_grads[wpe_off:wpe_off + T * C] = dres.reshape(B, T, C).sum(0).ravel()
    counts = np.bincount(tokens, minlength=V)
    starts = np.concatenate([[0], np.cumsum(counts)])
    order = np.concatenate([starts, np.argsort(tokens, kind="stable")]).astype(np.uint32)
    # ln_f: dweight = Σ_rows dout·x̂, dbias = Σ_rows dout, x̂ from x and the forward's (mean, rstd)
    lnf_x = f32(rng.standard_normal((rows, C)) * 2 + 0.5).astype(np.float64)
    lnf_dout = f32(rng.standard_normal((rows, C))).astype(np.float64)
    mean, rstd = (f32(s).astype(np.float64) for s in (lnf_x.mean(1), 1 / np.sqrt(lnf_x.var(1) + 1e-5)))
    ref_grads[lnf_off:lnf_off + C] = (lnf_dout * (lnf_x - mean[:, None]) * rstd[:, None]).sum(0)
    ref_grads[lnf_off + C:lnf_off + 2 * C] = lnf_dout.sum(0)
    ref_normed = ((ref_embedded - e_mean[:, None]) * e_rstd[:, None] * params[lnf_off:lnf_off + C]
                  + params[lnf_off + C:lnf_off + 2 * C])

    # the gradient norm's partial sums of squares, in the kernel's order: the token workgroups' (each
    # 32 channels' wte gradients of a token), the position workgroups' (each 256 wpe gradients), one per
    # ln_f column (its weight's and bias's), then normPartials(n) strided sums of the rest
    squares = ref_grads ** 2
    owned = np.zeros(n_params, bool)
    owned[wte_off:wte_off + V * C] = owned[wpe_off:wpe_off + T * C] = owned[lnf_off:lnf_off + 2 * C] = True
    parts = max(1, min(1024, -(-n_params // 2048)))

    def per_workgroup(x):
        return np.pad(x, (0, -len(x) % 256)).reshape(-1, 256).sum(1)

    def per_token_block(x):
        return np.pad(x.reshape(V, C), ((0, 0), (0, -C % 32))).reshape(V, -1, 32).sum(2).ravel()

    ref_partials = np.concatenate([per_token_block(squares[wte_off:wte_off + V * C]),
                                   per_workgroup(squares[wpe_off:wpe_off + T * C]),
                                   squares[lnf_off:lnf_off + C] + squares[lnf_off + C:lnf_off + 2 * C],
                                   np.bincount(np.arange(n_params) % (parts * 256) // 256,
                                               weights=np.where(owned, 0, squares), minlength=parts)])

    def check(o):
        report(f"embedding forward B={B} T={T} C={C}", o["out"], ref_out.ravel(), 1e-6)
        report(f"embedding in the first LayerNorm B={B} T={T} C={C} past={past}", o["embedded"], ref_embedded.ravel(),
               1e-6)
        report(f"its LayerNorm B={B} T={T} C={C}", o["normed"], ref_normed.ravel(), 1e-5)
        report(f"its mean/rstd B={B} T={T} C={C}", o["stats"], np.stack([e_mean, e_rstd], 1).ravel(), 1e-5)
        slabs = f" from {head_splits} head slabs" if head_splits else ""
        report(f"embedding backward (wte, wpe) B={B} T={T} C={C}{slabs}", o["grads"][:lnf_off], ref_grads[:lnf_off],
               1e-5)
        report(f"ln_f dweight, dbias B={B} T={T} C={C}", o["grads"][lnf_off:], ref_grads[lnf_off:], 1e-4)
        assert len(o["partials"]) == len(ref_partials), (len(o["partials"]), len(ref_partials))
        report(f"gradient norm's {len(ref_partials)} partials B={B} T={T} C={C}", o["partials"], ref_partials,
               1e-6 * ref_partials.max())

    add_case(dict(op="embedding", B=B, T=T, C=C, V=V, wteOff=wte_off, wpeOff=wpe_off, lnfOff=lnf_off, past=past,
                  eps=eps, nParams=n_params, headSplits=head_splits),
             {"params": f32(params), "tokens": tokens.astype(np.uint32), "order": order, "dres": f32(dres),
              "grads0": f32(grads0), "lnf_dout": f32(lnf_dout), "lnf_x": f32(lnf_x),
              "lnf_stats": f32(np.stack([mean, rstd], 1)), **head}, check)


embedding_case(3, 7, 10)
# chains of ~60 rows a token, as a frequent byte makes: the backward's 8-row loads and their remainder
embedding_case(4, 45, 12, ctx=45, distinct=3, tail=3000)  # and 4 norm workgroups, each striding past the tables
embedding_case(16, 40, 40, ctx=40, distinct=3)  # ~210 rows a token, as a space at medium; two channel blocks
embedding_case(8, 40, 6, ctx=40, distinct=4)  # ln_f's 320 rows: its 256 row lanes loop
embedding_case(4, 45, 12, ctx=45, distinct=3, head_splits=3)  # medium up: the head's weight gradient deferred


# --- softmax cross-entropy: the forward (losses, logits untouched) and the backward fused with it
def cross_entropy_case(rows, V=256, backward=True):
    logits = torch.tensor(rng.standard_normal((rows, V)) * 3, dtype=torch.float64, requires_grad=True)
    targets = rng.integers(0, V, rows)
    loss_rows = F.cross_entropy(logits, torch.tensor(targets), reduction="none")
    loss = loss_rows.mean()
    loss.backward()

    name = f"cross-entropy {'backward' if backward else 'forward'} rows={rows} V={V}"

    def check(o):
        report(f"{name} losses", o["losses"], loss_rows.detach().numpy(), 2e-5)
        if backward:
            report(f"{name} dlogits", o["logits"], logits.grad.numpy().ravel(), 1e-7)
        else:
            report(f"{name} logits untouched", o["logits"], f32(logits.detach().numpy()).ravel(), 0)

    add_case(dict(op="cross_entropy", rows=rows, V=V, backward=backward),
             {"logits": f32(logits.detach().numpy()), "targets": targets.astype(np.uint32)}, check)


cross_entropy_case(37)
cross_entropy_case(11, V=70)  # V not a multiple of the lanes per row
cross_entropy_case(37, backward=False)


# --- softmax cross-entropy as the prologue of the tied head's input gradient: C = dlogits·W, dlogits
# (cross_entropy_backward's) and the row losses stored for the step (medium up, the head's weight
# gradient deferred)
def cross_entropy_matmul_case(M, N, V, tile, vec):
    logits = torch.tensor(rng.standard_normal((M, V)) * 3, dtype=torch.float64, requires_grad=True)
    targets = rng.integers(0, V, M)
    loss_rows = F.cross_entropy(logits, torch.tensor(targets), reduction="none")
    loss_rows.mean().backward()
    dlogits = logits.grad.numpy()
    b_off = 4 if vec else 3  # an odd offset: the scalar kernel
    w = rng.standard_normal((V, N))
    ref = (dlogits @ w).ravel()
    name = f"matmul backward_input {M}x{N}x{V} tile {tile} cross-entropy prologue{' vec4' if vec else ''}"

    def check(o):
        report(f"{name}: product", o["C"], ref, 1e-6 * math.sqrt(V))
        report(f"{name}: dlogits stored", o["DL"], dlogits.ravel(), 1e-7)
        report(f"{name}: losses", o["losses"], loss_rows.detach().numpy(), 2e-5)

    add_case(dict(op="matmul", form="backward_input", M=M, N=N, K=V, tile=tile, aOff=0, bOff=b_off, biasOff=0, vec=vec,
                  ce={"scale": 1 / M}),
             {"A": f32(logits.detach().numpy()), "B": f32(np.concatenate([np.zeros(b_off), w.ravel()])),
              "targets": targets.astype(np.uint32)}, check)


cross_entropy_matmul_case(70, 44, 256, "32x32w-k32", vec=True)  # medium's head: 8 lanes a row, 8 steps each
cross_entropy_matmul_case(37, 21, 70, "32x32", vec=False)  # V not a multiple of the lanes' stride
cross_entropy_matmul_case(66, 36, 300, "64x64w", vec=True)  # 19 steps a lane: the passes as loops


# --- causal attention, forward + backward (head sizes 16, 32, 64; T across tile boundaries)
def attention_case(B, T, H, D, subgroups=False, forward_split=None, wide=False):
    """subgroups: merge a row's partial results by shuffles where a row's invocations fit a subgroup
    (the backward's 2; the forward's 8 only on subgroups of 8 or more, so forward_split 4 for SwiftShader's 4).
    wide: the layouts of more query rows than COMPACT_ATTENTION_MAX_ROWS (large and up), where these
    cases would take the compact ones."""
    C = H * D

    def t(shape):
        return torch.tensor(rng.standard_normal(shape), dtype=torch.float64, requires_grad=True)

    q, k, v = t((B, T, C)), t((B, T, C)), t((B, T, C))
    dout = rng.standard_normal((B, T, C))

    def heads(x):
        return x.view(B, T, H, D).transpose(1, 2)

    y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True).transpose(1, 2).reshape(B, T, C)
    y.backward(torch.tensor(dout))
    scores = heads(q) @ heads(k).transpose(-1, -2) / math.sqrt(D)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(scores, -1)  # (B,H,T)
    split = f" forward split {forward_split}" if forward_split else ""
    name = f"attention B={B} T={T} H={H} D={D}{split}{' wide' if wide else ''}"

    def check(o):
        report(f"{name} out", o["out"], y.detach().numpy().ravel(), 2e-6)
        report(f"{name} lse", o["lse"], lse.detach().numpy().ravel(), 2e-5)
        for g, ref in (("dq", q.grad), ("dk", k.grad), ("dv", v.grad)):
            report(f"{name} {g}", o[g], ref.numpy().ravel(), 2e-5)

    layout = {"forwardLayout": {"rows": 256 // forward_split, "split": forward_split}} if forward_split else {}
    add_case(dict(op="attention", B=B, T=T, H=H, C=C, wide=wide, **layout),
             {"q": f32(q.detach().numpy()), "k": f32(k.detach().numpy()), "v": f32(v.detach().numpy()),
              "dout": f32(dout)},
             check, subgroups)


attention_case(2, 70, 3, 16)  # blocks of 16 query rows: a partial last block
attention_case(1, 37, 2, 32)
attention_case(1, 40, 1, 64)  # the compact forward's tiles shrink to 16 rows to fit
attention_case(2, 100, 2, 32, wide=True)  # blocks of 32 query rows, a partial last one; key tiles across the diagonal
attention_case(2, 70, 3, 16, subgroups=True, forward_split=4)
attention_case(2, 100, 2, 32, subgroups=True, forward_split=4)
attention_case(2, 100, 2, 32, subgroups=True, wide=True)  # the backward's 2 invocations a row merge by shuffles
attention_case(1, 40, 1, 64, subgroups=True, wide=True)  # the forward's 8 invocations a row merge as without subgroups


# --- attention forward against a KV cache: queries at past..past+T-1, keys 0..kvT-1 of which the first past+T
# are filled; query i's q at row past + i of q's buffer, as the KV cache's k and v (other rows: noise). One
# query (a decoded token) runs on attention_decode.js, or with tiled=True on attention.js's tiles, which
# take it where the decode kernel does not fit (a head of D/4 not dividing its 128 invocations)
def attention_cached_case(T, past, kvT, H, D, tiled=False):
    C = H * D
    q_rows, k, v = rng.standard_normal((kvT, C)), rng.standard_normal((kvT, C)), rng.standard_normal((kvT, C))
    q = q_rows[past:past + T]
    out, lse = np.zeros((T, C)), np.zeros((H, T))
    for h in range(H):
        hs = slice(h * D, h * D + D)
        for i in range(T):
            s = k[:past + i + 1, hs] @ q[i, hs] / math.sqrt(D)
            lse[h, i] = np.log(np.sum(np.exp(s - s.max()))) + s.max()
            out[i, hs] = np.exp(s - lse[h, i]) @ v[:past + i + 1, hs]
    kind = "attention_decode" if T == 1 and not tiled else "tiles"
    name = f"attention cached T={T} past={past} kvT={kvT} H={H} D={D} on {kind}"

    def check(o):
        report(f"{name} out", o["out"], out.ravel(), 2e-6)
        report(f"{name} lse", o["lse"], lse.ravel(), 2e-5)

    add_case(dict(op="attention_cached", T=T, past=past, kvT=kvT, H=H, C=C, tiled=tiled),
             {"q": f32(q_rows), "k": f32(k), "v": f32(v)}, check)


attention_cached_case(1, 45, 64, 2, 32)  # a decode step
attention_cached_case(1, 45, 64, 2, 32, tiled=True)
attention_cached_case(1, 100, 128, 1, 64)
attention_cached_case(1, 0, 32, 3, 16)  # the first token: one key, most invocations with none
attention_cached_case(1, 511, 512, 2, 64)  # a full 512-key window: 2 a score invocation, 32 a value lane in 4 rounds
attention_cached_case(1, 300, 400, 4, 8)  # 128 key groups of 2 lanes; the window part full
attention_cached_case(5, 7, 16, 2, 16)


# --- the decode chain (decode_row.js): each dispatch starts from a residual row `base` plus a bias plus n partial
# rows of `parts` (block 0's from the token's embedding), stores that row, and leaves its own partial rows in
# `parts`. A summed row's float64 reference, and the inputs a case's row takes (base at base_off, bias in P at
# bias_off, the partial rows at parts_off of a parts buffer with noise around them)
def summed_row_inputs(C, nparts, P_len, parts_len, base_off=8, parts_off=None):
    base = np.concatenate([np.zeros(base_off), rng.standard_normal(C) * 2 + 0.5])
    parts_off = parts_len - nparts * C if parts_off is None else parts_off
    parts = rng.standard_normal(parts_len) * 0.5
    bias_off = P_len
    P_extra = rng.standard_normal(C + 4) * 0.3
    row = f32(base).astype(np.float64)[base_off:] + f32(P_extra).astype(np.float64)[:C] \
        + f32(parts).astype(np.float64)[parts_off:parts_off + nparts * C].reshape(nparts, C).sum(0)
    values = dict(baseOff=base_off, biasOff=bias_off, partsOff=parts_off, nparts=nparts)
    return row, values, base, P_extra, parts


def layernorm64(x, w, b, eps):
    mean = x.mean()
    return (x - mean) / math.sqrt(((x - mean) ** 2).mean() + eps) * w + b


def check_summed_row(name, o, row):
    report(f"{name} the row stored", o["store"][8:], row, 2e-5)
    report(f"{name} the store before its offset", o["store"][:8], np.zeros(8), 0)


# attention_decode_qkv.js: the row, ln1, q/k/v into the KV cache's views (qkvStride floats apart; rows other than
# past hold earlier keys and values, or noise past the window), attention, and o_proj's partial row of each head.
# embed (a token): block 0's, whose row is the token's embedding at position past (wte, wpe after the weights)
def attention_decode_qkv_case(past, kvT, H, D, nparts, embed=None, eps=1e-5):
    C = H * D
    # each projection's weight and bias together (as the model's layout), padded: wStride apart
    w_off, w_stride = 12, C * C + C + 4
    bias_off = w_off + C * C
    ln_w = w_off + 3 * w_stride + 4
    ln_b = ln_w + C + 4
    o_off = ln_b + C + 4
    P_len = o_off + C * C + 4
    parts_out = 4 * C  # the heads' partial rows after 4 rows of others
    row, values, base, P_extra, parts = summed_row_inputs(C, nparts, P_len, parts_out + H * C + nparts * C + 8,
                                                          parts_off=parts_out + H * C)
    P = np.concatenate([rng.standard_normal(P_len) * (2 / math.sqrt(C)), P_extra])  # products of order 1 at every width
    P[ln_w:ln_w + C] += 1.0
    embedding = {}
    if embed is not None:
        wte_off = len(P) + 4
        wpe_off = wte_off + (embed + 2) * C
        P = np.concatenate([P, np.zeros(4), rng.standard_normal((embed + 2 + kvT) * C)])
        row = f32(P).astype(np.float64)[wte_off + embed * C:wte_off + embed * C + C] \
            + f32(P).astype(np.float64)[wpe_off + past * C:wpe_off + past * C + C]
        embedding = dict(embed=dict(wteOff=wte_off, wpeOff=wpe_off))
        base = np.array([embed, 7], np.uint32)  # the token (and another)
    qkv_stride = ((kvT * C + 63) // 64) * 64
    cache = rng.standard_normal(3 * qkv_stride)
    Pf = f32(P).astype(np.float64)
    ln = layernorm64(row, Pf[ln_w:ln_w + C], Pf[ln_b:ln_b + C], eps)
    new = [Pf[w_off + i * w_stride:w_off + i * w_stride + C * C].reshape(C, C) @ ln
           + Pf[bias_off + i * w_stride:bias_off + i * w_stride + C] for i in range(3)]
    cache64 = f32(cache).astype(np.float64)
    views = [cache64[i * qkv_stride:i * qkv_stride + kvT * C].reshape(kvT, C).copy() for i in range(3)]
    for i in range(3):
        views[i][past] = new[i]
    W_o = Pf[o_off:o_off + C * C].reshape(C, C)
    head_parts = np.zeros((H, C))
    for h in range(H):
        hs = slice(h * D, h * D + D)
        s = views[1][:past + 1, hs] @ new[0][hs] / math.sqrt(D)
        att = np.exp(s - s.max()) / np.sum(np.exp(s - s.max())) @ views[2][:past + 1, hs]
        head_parts[h] = W_o[:, hs] @ att
    row_from = f"parts={nparts}" if embed is None else "embedding"
    name = f"attention_decode_qkv past={past} kvT={kvT} H={H} D={D} {row_from}"

    def check(o):
        check_summed_row(name, o, row)
        got = o["qkv"].astype(np.float64)
        for i, which in enumerate("qkv"):
            at = i * qkv_stride + past * C
            report(f"{name} {which} at row past", got[at:at + C], new[i], 2e-5)
        this_row = np.s_[past * C:(past + 1) * C]
        report(f"{name} the cache's other rows", np.delete(got[qkv_stride:].reshape(2, -1), this_row, axis=1),
               np.delete(f32(cache)[qkv_stride:].reshape(2, -1), this_row, axis=1), 0)
        report(f"{name} o_proj's partial rows", o["parts"][parts_out:parts_out + H * C], head_parts.ravel(), 2e-5)
        report(f"{name} the parts buffer elsewhere", np.delete(o["parts"], np.s_[parts_out:parts_out + H * C]),
               np.delete(f32(parts), np.s_[parts_out:parts_out + H * C]), 0)

    add_case(dict(op="attention_decode_qkv", C=C, H=H, kvT=kvT, past=past, wOff=w_off, wStride=w_stride,
                  biasOff=bias_off, lnW=ln_w, lnB=ln_b, oOff=o_off, qkvStride=qkv_stride, partsOut=parts_out, eps=eps,
                  row=values | embedding),
             {"x": base if embed is not None else f32(base), "P": f32(P), "qkv": f32(cache), "parts": f32(parts)},
             check)


attention_decode_qkv_case(45, 64, 2, 32, 5)  # 96 outputs in 3 passes of 32; C4 = 16: 16 groups sum the partials
attention_decode_qkv_case(0, 32, 3, 16, 0, embed=3)  # the first token (its own key only), block 0: its embedding
attention_decode_qkv_case(20, 32, 3, 16, 0, embed=1)  # block 0 further on; the partial rows' buffer written only
attention_decode_qkv_case(300, 320, 2, 64, 19, eps=1e-3)  # 192 outputs in 6 passes; 301 keys in 3 value rounds
attention_decode_qkv_case(7, 16, 5, 64, 3)  # C = 320: C4 = 80, 3 groups; o_proj's 320 outputs in 2 rounds


# mlp_decode.js: the row, ln2, fc_in + GELU over each slice of 32 hidden units (16 where 32 do not divide 4C), and
# fc_out's partial row of each slice
def mlp_decode_case(C, nparts, eps=1e-5):
    S = 32 if (4 * C) % 32 == 0 else 16
    in_off = 8
    in_bias = in_off + 4 * C * C
    out_off = in_bias + 4 * C + 4
    ln_w = out_off + 4 * C * C
    ln_b = ln_w + C
    P_len = ln_b + C + 4
    slices = 4 * C // S
    parts_out = 2 * C
    row, values, base, P_extra, parts = summed_row_inputs(C, nparts, P_len, parts_out + slices * C + nparts * C + 4,
                                                          parts_off=parts_out + slices * C)
    P = np.concatenate([rng.standard_normal(P_len) * (1.5 / math.sqrt(C)), P_extra])
    P[ln_w:ln_w + C] += 1.0
    Pf = f32(P).astype(np.float64)
    ln = layernorm64(row, Pf[ln_w:ln_w + C], Pf[ln_b:ln_b + C], eps)
    h = Pf[in_off:in_bias].reshape(4 * C, C) @ ln + Pf[in_bias:in_bias + 4 * C]
    g = 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
    W_out = Pf[out_off:out_off + 4 * C * C].reshape(C, 4 * C)
    slice_parts = np.stack([W_out[:, j * S:(j + 1) * S] @ g[j * S:(j + 1) * S] for j in range(slices)])
    name = f"mlp_decode C={C} parts={nparts} ({slices} slices of {S})"

    def check(o):
        check_summed_row(name, o, row)
        report(f"{name} fc_out's partial rows", o["parts"][parts_out:parts_out + slices * C], slice_parts.ravel(), 2e-5)
        got = o["parts"][parts_out:parts_out + slices * C].reshape(slices, C).astype(np.float64)
        report(f"{name} the partial rows sum to fc_out's product", got.sum(0), W_out @ g, 1e-5)
        report(f"{name} the parts buffer elsewhere", np.delete(o["parts"], np.s_[parts_out:parts_out + slices * C]),
               np.delete(f32(parts), np.s_[parts_out:parts_out + slices * C]), 0)

    add_case(dict(op="mlp_decode", C=C, inOff=in_off, inBiasOff=in_bias, outOff=out_off, lnW=ln_w, lnB=ln_b,
                  partsOut=parts_out,
                  eps=eps, row=values), {"x": f32(base), "P": f32(P), "parts": f32(parts)}, check)


mlp_decode_case(48, 3)  # tiny's width: 6 slices
mlp_decode_case(36, 0)  # 4C = 144: slices of 16; no partial rows, the base and the bias
mlp_decode_case(320, 10)  # C4 = 80: 3 groups sum the partials; fc_out's 320 outputs in 2 rounds
mlp_decode_case(520, 13)  # C4 = 130: one invocation sums a column; fc_out's 520 outputs in 3 rounds (two passes)


# logits_decode.js: the row, ln_f and the tied head's logits, 32 a workgroup
def logits_decode_case(C, V, nparts, logits_off=3, eps=1e-5):
    w_off = 4
    ln_w = w_off + V * C
    ln_b = ln_w + C
    P_len = ln_b + C + 4
    row, values, base, P_extra, parts = summed_row_inputs(C, nparts, P_len, nparts * C + 12, parts_off=4)
    P = np.concatenate([rng.standard_normal(P_len) * 0.3, P_extra])
    P[ln_w:ln_w + C] += 1.0
    Pf = f32(P).astype(np.float64)
    logits = Pf[w_off:w_off + V * C].reshape(V, C) @ layernorm64(row, Pf[ln_w:ln_w + C], Pf[ln_b:ln_b + C], eps)
    name = f"logits_decode C={C} V={V} parts={nparts}"

    def check(o):
        check_summed_row(name, o, row)
        report(f"{name} logits", o["logits"][logits_off:], logits, 2e-5)
        report(f"{name} before logits_off", o["logits"][:logits_off], np.zeros(logits_off), 0)

    add_case(dict(op="logits_decode", C=C, V=V, wOff=w_off, lnW=ln_w, lnB=ln_b, logitsOff=logits_off, eps=eps,
                  row=values),
             {"x": f32(base), "P": f32(P), "parts": f32(parts)}, check)


logits_decode_case(48, 256, 6)  # tiny's: 8 workgroups of 32 logits
logits_decode_case(96, 70, 0)  # a last workgroup part full; no partial rows, the base and the bias
logits_decode_case(384, 64, 48)  # massive's width and slices: 2 groups of invocations sum 24 partial rows each


# --- clip to the global norm (from the norm's partials), AdamW (decay on the masked parameters only)
def adamw_case(n, grad_scale, t, rows=37, workgroups=None):
    """Also the step's mean loss over `rows` row losses, which AdamW's dispatch computes; workgroups:
    the grid's cap (the kernel's default where None)."""
    training = dict(lr=3e-3, beta1=0.9, beta2=0.95, eps=1e-8, weightDecay=0.1, gradClip=1.0)
    losses = rng.random(rows) * 5
    params, m = rng.standard_normal(n), rng.standard_normal(n) * 0.01
    v = rng.random(n) * 1e-4
    grads = rng.standard_normal(n) * grad_scale
    decay = rng.random(n) < 0.6
    words = np.zeros((n + 31) // 32, dtype=np.uint64)
    for i in np.nonzero(decay)[0]:
        words[i >> 5] |= np.uint64(1) << np.uint64(i & 31)
    p32, m32, v32, g32 = (np.float32(a).astype(np.float64) for a in (params, m, v, grads))
    norm = math.sqrt(float(np.sum(g32 * g32)))
    coef = min(1.0, training["gradClip"] / (norm + 1e-6))
    g = g32 * coef
    lr, b1, b2 = training["lr"], training["beta1"], training["beta2"]
    p = np.where(decay, p32 * (1 - lr * training["weightDecay"]), p32)
    m1 = b1 * m32 + (1 - b1) * g
    v1 = b2 * v32 + (1 - b2) * g * g
    p = p - (lr / (1 - b1 ** t)) * m1 / (np.sqrt(v1) / math.sqrt(1 - b2 ** t) + training["eps"])
    name = f"adamw n={n} |g|={norm:.3g} t={t}" + (f" in {workgroups} workgroups" if workgroups else "")

    def check(o):
        report(f"{name} norm (relative)", [o["scal"][0] / norm], [1.0], 1e-5)
        report(f"{name} clip coefficient", [o["scal"][1]], [coef], 1e-6)
        report(f"{name} mean loss of {rows} rows", [o["scal"][2]], [f32(losses).astype(np.float64).mean()], 2e-6)
        report(f"{name} m", o["m"], m1, 1e-7)
        report(f"{name} v", o["v"], v1, 1e-9)
        report(f"{name} params", o["params"], p, 2e-6)

    grid = {"workgroups": workgroups} if workgroups else {}  # absent: ops' own cap
    # the norm's partial sums of squares, as the embedding's backward leaves them: here 5 uneven ones
    partials = [float(np.sum(chunk * chunk)) for chunk in np.array_split(g32, 5)]
    add_case(dict(op="adamw", n=n, t=t, training=training, rows=rows, parts=len(partials), **grid),
             {"params": f32(params), "m": f32(m), "v": f32(v), "grads": f32(grads), "decay": words.astype(np.uint32),
              "losses": f32(losses), "partials": f32(partials)},
             check)


adamw_case(70001, 0.1, 3)   # norm ≫ 1: clipped
adamw_case(1000, 1e-3, 1, rows=600)   # norm < 1: coefficient 1; losses past one workgroup's 256
adamw_case(70001, 0.1, 2, workgroups=5)   # each invocation strides over 55 parameters, the last short


@pytest.fixture(scope="module")
def host():
    with BrowserHost() as host:  # closed also when the first call fails (else later Playwright tests fail)
        print("adapter:", host.call("adapterInfo"))
        yield host


@pytest.fixture(scope="module")
def outputs(host):
    inputs = {name: b64(a) for _, ins, _ in CASES for name, a in ins.items()}
    result = host.call("kernelCases", [c for c, _, _ in CASES], inputs)
    return {k: from_b64(v) for k, v in result.items()}


@pytest.mark.parametrize("index", range(len(CASES)), ids=[f"{c['op']}-{c['id']}" for c, _, _ in CASES])
def test_kernel_matches_reference(outputs, index):
    case, _, check = CASES[index]
    prefix = case["id"] + "_"
    check({k[len(prefix):]: v for k, v in outputs.items() if k.startswith(prefix)})


def test_every_dumped_variant_compiles_in_the_page(host, tmp_path):
    """Every WGSL variant the trainer can use (tests/webgpu/hosts/dump_wgsl.mjs) compiles in Chromium: its
    shader module, without errors (Tint's WGSL validation as the browser runs it), and a broken one does not.
    No pipelines: SwiftShader's LLVM JIT takes 1-21 s a pipeline, so only the kernel cases above make theirs
    for real, and test_dump_wgsl.py makes the others' on Dawn's Null backend (layout, limits; all but those
    past WebGPU's default limits)."""
    dump = json.loads(subprocess.run(["node", str(ROOT / "tests/webgpu/hosts/dump_wgsl.mjs"), str(tmp_path)],
                                     check=True,
                                     capture_output=True, text=True, timeout=300).stdout.strip().splitlines()[-1])
    sources = [{"name": f[:-5], "also": dump["duplicates"].get(f[:-5], []), "code": (tmp_path / f).read_text()}
               for f in dump["files"]]
    result = host.call("compileWgsl", sources)
    print(f"{len(sources)} variants: {result['compiled']} compiled here ({result['alreadyMade']} of them also made "
          f"into pipelines by the kernel cases), {len(result['failures'])} failed")
    assert result["failures"] == []
    assert result["compiled"] == len(sources)

    broken = {"broken_syntax": "@compute @workgroup_size(1) fn main() { let x = 1u }",
              "broken_type": "@compute @workgroup_size(1) fn main() { let x: u32 = 1.5; }"}
    result = host.call("compileWgsl", [{"name": name, "also": [], "code": code} for name, code in broken.items()])
    assert result["compiled"] == 0 and [f["name"] for f in result["failures"]] == ["broken_syntax", "broken_type"]
    assert all(f["errors"] for f in result["failures"])
