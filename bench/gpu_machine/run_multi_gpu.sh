#!/bin/bash
# On a machine with several GPUs (issue 15): `tinygpt train` on 1 GPU and under torchrun on N GPUs,
# NCCL, 50 steps per run. Strong scaling keeps the global batch (each rank trains batch/N rows);
# weak scaling keeps each GPU's rows (global batch x N). Each run's summary line (tokens/s, MFU)
# lands in $OUT/<preset>_<how>.log and the loss agreement of N GPUs vs 1 in $OUT/agreement.json.
# A large model trained on N GPUs comes back as an fp16 file for the page.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD
# NVLink multicast stays off (the device notes: it can take the host's shared GPUs out of service).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
N=${NGPU:-$(python3 -c 'import torch; print(torch.cuda.device_count())')}
STEPS=${STEPS:-50}
CKPT=${CKPT:-/tmp/ckpt}
mkdir -p "$CKPT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpus.txt"

train() {  # name nproc extra-args...
  local name=$1 nproc=$2; shift 2
  local launch=(python3 -m python_ref.cli train)
  [ "$nproc" -gt 1 ] && launch=(torchrun --standalone --nproc_per_node "$nproc" -m python_ref.cli train)
  "${launch[@]}" --steps "$STEPS" --eval-every 0 --device cuda --quiet --out "$CKPT/$name.tinygpt" "$@" \
    > "$OUT/$name.log" 2>&1 || echo "$name failed: exit $?"
  echo "$name: $(grep 'final loss' "$OUT/$name.log" | tail -1)"
}

for preset in ${PRESETS:-huge massive}; do
  batch=$(python3 -c "from python_ref.config import train_config; print(train_config('$preset').batch)")
  train "${preset}_1gpu" 1 --preset "$preset"
  train "${preset}_${N}gpu_strong" "$N" --preset "$preset"
  train "${preset}_1gpu_batch$((batch * N))" 1 --preset "$preset" --batch $((batch * N))
  train "${preset}_${N}gpu_weak" "$N" --preset "$preset" --batch $((batch * N))
done

# LARGE=0 and BEHEMOTH=0 leave out these runs (behemoth's two took ~5 min on 2 GPUs, mostly each
# process building the 473M-parameter portable init on its CPU, before that init was drawn on threads)
if [ "${LARGE:-1}" != 0 ]; then
  train "large_${N}gpu" "$N" --preset large --steps 600
  python3 -m python_ref.cli export "$CKPT/large_${N}gpu.tinygpt" "$OUT/large_${N}gpu_fp16.tinygpt" --fp16
fi

# behemoth's batch of 1 cannot be split: N rows per step on every side; FSDP2 shards it over N GPUs
if [ "${BEHEMOTH:-1}" != 0 ]; then
  train behemoth_1gpu 1 --preset behemoth --batch "$N"
  train "behemoth_${N}gpu_fsdp" "$N" --preset behemoth --batch "$N" --fsdp
fi

python3 - "$CKPT" "$OUT/agreement.json" <<'EOF'
import json, sys
from pathlib import Path
import numpy as np
from python_ref import tinygpt_file

def header(path):  # the header alone: behemoth's state is 5.6 GB
    with open(path, "rb") as f:
        _, _, n = tinygpt_file.PREFIX.unpack(f.read(tinygpt_file.PREFIX.size))
        return tinygpt_file.decode_header(f.read(n))

runs = {p.stem: header(p) for p in Path(sys.argv[1]).glob("*.tinygpt")}
out = {}
for one, h1 in runs.items():
    for many, hn in runs.items():
        t1, tn = h1["training"], hn["training"]
        if t1["worldSize"] == 1 < tn["worldSize"] and h1["preset"] == hn["preset"] and t1["batch"] == tn["batch"]:
            a, b = (np.array(h["lossHistory"])[:, 1] for h in (hn, h1))
            out[f"{many} vs {one}"] = {"steps": len(b), "max_rel_loss_diff": float(np.max(np.abs(a - b) / np.abs(b)))}
json.dump(out, open(sys.argv[2], "w"), indent=1)
print(json.dumps(out, indent=1))
EOF
