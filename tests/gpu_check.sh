#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: the unit tests, then the command line on CUDA (bfloat16,
# torch.compile, Ctrl-C and --resume, checkpoints moved between the GPU and the CPU).
#
#   bash tests/gpu_check.sh [OUTDIR]
#
# A few minutes; every part has its own time limit and the script goes on after a failure,
# printing one PASS / FAIL line per part at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${1:-$(mktemp -d)}
mkdir -p "$OUTDIR"
PY=${PY:-python3}
DEV=${DEV:-cuda}  # DEV=cpu QUICK=1 tries the script on a machine without a GPU
export PYTHONUNBUFFERED=1
results=()
part() {  # part NAME SECONDS COMMAND...
    local name=$1 limit=$2
    shift 2
    echo "== $name"
    local start=$SECONDS
    if timeout "$limit" "$@"; then
        results+=("PASS $name ($((SECONDS - start)) s)")
    else
        results+=("FAIL $name (exit $?, $((SECONDS - start)) s)")
    fi
}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"

[ -n "${QUICK:-}" ] || part "unit tests" 200 $PY -m pytest -q -x -n 8 -p no:cacheprovider tests --ignore=tests/browser

T="train --preset textbook --data names --batch-size 32 --eval-every 50 --dropout 0.1 --no-progress --samples 2"
export PY DEV OUTDIR T
part "train on cuda, 200 steps" 90 $PY -m gptlib $T --steps 200 --device $DEV --out "$OUTDIR/whole.pt"
[ -n "${QUICK:-}" ] || part "bfloat16 + compile, 100 steps" 150 $PY -m gptlib $T --steps 100 --device $DEV \
    --dtype bfloat16 --compile --out "$OUTDIR/bf16.pt"

ctrl_c_then_resume() {
    # Ctrl-C 1.5 s into training, then --resume to the same total: the weights must equal the
    # run that never stopped (CUDA's backward adds in a varying order: equal to about 1e-6).
    # A background job of a script starts with SIGINT ignored; give it Ctrl-C as in a terminal.
    $PY -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' \
        $PY -m gptlib $T --steps 200 --device $DEV --out "$OUTDIR/part.pt" >"$OUTDIR/part.log" 2>&1 &
    local pid=$!
    until grep -q "^training: Ctrl-C" "$OUTDIR/part.log" 2>/dev/null; do sleep 0.2; done
    sleep 1.5
    kill -INT $pid
    wait $pid
    echo "exit $?"
    cat "$OUTDIR/part.log"
    ! grep -q Traceback "$OUTDIR/part.log" || return 1
    $PY -m gptlib train --resume "$OUTDIR/part.pt" --device $DEV --no-progress --samples 0 || return 1
    $PY - "$OUTDIR/whole.pt" "$OUTDIR/part.pt" <<'PYEOF'
import sys
from gptlib.checkpoint import load_checkpoint
a, b = (load_checkpoint(p) for p in sys.argv[1:3])
wa, wb = a.model.state_dict(), b.model.state_dict()
diff = max((wa[k] - wb[k]).abs().max().item() for k in wa)
print(f"steps {a.step} and {b.step}; max |whole - interrupted and resumed| = {diff:.3g}")
sys.exit(0 if a.step == b.step and diff <= 1e-5 else 1)
PYEOF
}
export -f ctrl_c_then_resume
part "Ctrl-C on cuda, then --resume" 120 bash -c ctrl_c_then_resume

across() {
    # saved on the GPU, resumed on the CPU; saved on the CPU, resumed on the GPU
    $PY -m gptlib train --resume "$OUTDIR/whole.pt" --steps 205 --device cpu --no-progress \
        --samples 0 --out "$OUTDIR/on-cpu.pt" || return 1
    $PY -m gptlib train --resume "$OUTDIR/on-cpu.pt" --steps 210 --device $DEV --no-progress \
        --samples 0 --out "$OUTDIR/back-on-cuda.pt"
}
export -f across
part "resume across devices" 90 bash -c across

echo
printf '%s\n' "${results[@]}"
! printf '%s\n' "${results[@]}" | grep -q ^FAIL
