#!/bin/bash
# On the GPU machine: `tinygpt train` (python_ref, the trainer torchrun runs) in fp32 and bf16 per
# preset, one process on one GPU; the summary line of each run (tokens/s, TFLOP/s, MFU) is echoed
# and its log left in $OUT. bench/gpu_machine/run_device.sh gives the WGSL trainer's figures beside it.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD
for preset in ${TRAIN_PRESETS:-medium large huge massive behemoth}; do
  steps=${TRAIN_STEPS:-300}
  [ "$preset" = behemoth ] && steps=${BEHEMOTH_STEPS:-100}
  for precision in fp32 bf16; do
    flag=""; [ "$precision" = bf16 ] && flag=--bf16
    python3 -m python_ref.cli train --preset "$preset" --steps "$steps" --eval-every 0 --device cuda $flag --quiet \
      > "$OUT/train_${preset}_${precision}.log" 2>&1 || echo "train $preset $precision failed: exit $?"
    echo "$preset $precision: $(tail -1 "$OUT/train_${preset}_${precision}.log")"
  done
done
