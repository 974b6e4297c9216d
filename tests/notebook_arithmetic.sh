#!/usr/bin/env bash
# Run every notebook under nbval with one of two arithmetics, and say which on screen.
#
#   tests/notebook_arithmetic.sh portable NOTEBOOK...   compare with the stored outputs under an
#       arithmetic that does not depend on the CPU: ATen's scalar kernels and MKL's compatible
#       code path (the stored outputs were made this way, by `make notebooks`)
#   tests/notebook_arithmetic.sh native NOTEBOOK...     compare under this CPU's own vector kernels
#       (AVX2, AVX-512): a printed number that moves here was printed too finely
#   tests/notebook_arithmetic.sh env                    print the portable settings (for make)
#
# The portable settings exist on x86-64 only. Elsewhere (arm64: Apple-silicon laptops) both modes
# run every notebook top to bottom, where any failing cell or in-cell assertion fails the test,
# and compare only the cells marked NBVAL_CHECK_OUTPUT; the banner says so.
set -euo pipefail
mode=$1
shift
arch=${NOTEBOOK_ARCH:-$(uname -m)}  # NOTEBOOK_ARCH=arm64 tries the other path here
portable="ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE"
case "$arch" in x86_64 | amd64) x86=1 ;; *) x86=0 ;; esac
if [ "$mode" = env ]; then
    [ $x86 = 1 ] && echo "$portable"
    exit 0
fi
PY=${PY:-.venv/bin/python}
nbval=(-m pytest -q -n 2 --dist loadscope --nbval-sanitize-with notebooks/sanitize.cfg)
# The reader's package is an empty folder: stored outputs always show the reference standing in.
yours=$(mktemp -d)
trap 'rm -rf "$yours"' EXIT
one_thread=(OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONHASHSEED=0 GPTLIB_YOURS="$yours")
if [ $x86 = 0 ]; then
    echo "== notebooks ($mode): this $arch CPU has no portable arithmetic to compare stored outputs"
    echo "   under; every notebook runs top to bottom with its in-cell checks, outputs not compared"
    env "${one_thread[@]}" "$PY" "${nbval[@]}" --nbval-lax "$@"
fi
case "$mode" in
portable)
    echo "== notebooks, stored outputs compared exactly under the portable arithmetic ($portable)"
    env "${one_thread[@]}" $portable "$PY" "${nbval[@]}" --nbval "$@"
    ;;
native)
    cap=$("$PY" -c "import torch; print(torch.backends.cpu.get_cpu_capability())")
    echo "== notebooks, stored outputs compared exactly under this CPU's own arithmetic ($cap)"
    env "${one_thread[@]}" "$PY" "${nbval[@]}" --nbval "$@"
    ;;
*)
    echo "usage: $0 portable|native NOTEBOOK... | env" >&2
    exit 2
    ;;
esac
