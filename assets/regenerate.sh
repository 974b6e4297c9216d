#!/usr/bin/env bash
# Regenerates every checkpoint in assets/ (about 7 minutes on a 2-core CPU). Run from the repo root.
set -euo pipefail
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
for h in 1 2 4 8 16; do
  python -m gptlib train --data names --preset microgpt --n-head "$h" --steps 3000 --batch-size 64 \
    --lr 1e-2 --seed 0 --no-progress --no-optimizer-state --samples 0 --out "assets/names-microgpt-h$h.pt"
done
python -m gptlib train --data names --preset textbook --block-size 64 --steps 600 --batch-size 32 --lr 2e-3 \
  --seed 0 --no-progress --no-optimizer-state --samples 0 --out assets/names-textbook.pt
python -m gptlib train --data tang300 --preset textbook --n-layer 2 --n-embd 64 --steps 300 --batch-size 32 \
  --lr 3e-3 --seed 0 --no-progress --no-optimizer-state --samples 0 --out assets/tang300-small.pt
