// The sizes that decide a training step's shape, which the Trainer (trainer.js) and its LoRA step
// (lora.js) both follow: where a LayerNorm is its product's prologue, where a Linear's two backward
// products share a dispatch, the split-K scratch those choices need, and the steps kept in flight.
import { chooseSummedSplits } from "./kernels/matmul.js";

/** Steps in flight: each leaves its loss in one of this many mappable buffers until the host reads it. */
export const LOSS_RING = 8;

// Every Linear's two backward products share a dispatch (Ops.matmulPair) while the block's biggest
// product (rows × 4C outputs) is this small: a small model's step is paid per dispatch, while a big
// one's pairs are slower than their products apart (a pair takes 256-invocation tiles only, and two
// products' registers). Past it, a Linear pairs only where both its products' own tiles pair as they
// are (fc_in and fc_out from xl on, 64×64w), which still pays (see docs/lab/2026-11-25-wgsl-step-vs-pytorch.md §16).
export const PAIRED_MAX_OUTPUTS = 500_000;

// A LayerNorm is the prologue of the product it feeds (Ops.matmul's ln) only while its input
// (rows × C) is this small: each column tile of the product then recomputes its rows' statistics,
// which for bigger activations costs more than the dispatch it saves (see
// docs/lab/2026-11-25-wgsl-step-vs-pytorch.md §12). Decoding (1 row) always takes the prologue.
export const LAYERNORM_PROLOGUE_MAX_ACTIVATIONS = 200_000;

/**
 * Floats of the scratch where products leave their split-K slabs for the LayerNorm after them to sum
 * (chooseSummedSplits): fc_out's forward where that LayerNorm is a dispatch of its own (not a
 * prologue), and the input gradients of fc_in and of q/k/v where a Linear's backward products are
 * not all paired; sized for the biggest of them at `rows` rows (generation's prefill has fewer).
 */
export function summedSlabFloats({ dModel: C }, rows) {
  const forward = rows * C > LAYERNORM_PROLOGUE_MAX_ACTIVATIONS, backward = rows * 4 * C > PAIRED_MAX_OUTPUTS;
  const slabs = (on, K) => {
    const { splits } = chooseSummedSplits("forward", rows, C, K);
    return on && splits > 1 ? splits * rows * C : 0;
  };
  return Math.max(16, slabs(forward, 4 * C), slabs(backward, 4 * C), slabs(backward, 3 * C));
}
