#!/usr/bin/env bash
# One GPU session's work (issues 5 and 18), run ON the device machine from the repo root with
# `carry: [".whl"]` (see scripts/gpu_wheels.sh). Steps (STEPS, comma-separated):
#   tests   the CUDA tests: events vs profiler within 5%, bf16 8192³ ≥ 600 TFLOP/s, OOM recovery
#   bench   the runner-throughput benchmark on the CUDA backend (20 µs and 1 ms ops, GPU busy %)
#   traces  torch.profiler traces of a small GPT block's training step (scripts/gpu_traces.py)
#   fig24a  DRAM bytes of a 4096³ GEMM under Nsight Compute (scripts/gpu_fig24a.py)
#   sweep   every llm-* catalog spec (fwd+bwd, bf16/fp16, 1B–70B shapes) into $STORE; resumable:
#           a vector already recorded is skipped, so call again to go on where it stopped
# Everything it writes goes to $WORK/out, packed at the end into $OUT/gpu-session.tgz.* (15 MB
# parts: the device tool brings back at most 8 files of 16 MiB; `cat` the parts to unpack). It stops starting new work
# BUDGET_S seconds after it began, inside the device's 10-minute limit per command.
# On a CPU, for a dry run: WHEELS= BACKEND=cpu STEPS=sweep SPECS=llm-rmsnorm WHERE="b == 1" OUT=/tmp/o
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
WORK=${WORK:-gpu-work}  # an ignored path: it survives between calls on a warm machine
STEPS=${STEPS:-tests,bench,sweep}
BACKEND=${BACKEND:-cuda}
BUDGET_S=${BUDGET_S:-540}
STORE=${STORE:-$WORK/catalog.duckdb}
WHERE=${WHERE:-}
PY=${PYTHON:-python3}
FINAL=$OUT OUT=$WORK/out
mkdir -p "$FINAL" "$OUT" "$(dirname "$STORE")"
WHEELS=${WHEELS-.whl}  # the carried wheels (python 3.12); WHEELS= skips installing them
if [ -n "$WHEELS" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$WHEELS"/*.whl
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
start=$(date +%s)
left() { echo $(( BUDGET_S - ($(date +%s) - start) )); }
has() { [[ ",$STEPS," == *",$1,"* ]]; }

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; } \
  | tee "$OUT/device.txt"
if has tests; then
  $PY -m pytest -q -p no:cacheprovider -m cuda tests/test_cuda_backend.py 2>&1 \
    | tee "$OUT/cuda_tests.txt" || true
fi
if has bench; then
  $PY -m pytest -q -p no:cacheprovider benchmarks/bench_cuda_runner.py --benchmark-only \
    --benchmark-json "$OUT/bench_cuda_runner.json" 2>&1 | tee "$OUT/bench_cuda_runner.txt" || true
fi
if has traces; then
  $PY scripts/gpu_traces.py "$OUT/traces" 2>&1 | tee "$OUT/traces.txt" || true
fi
if has fig24a; then
  $PY scripts/gpu_fig24a.py "$OUT/fig24a" 2>&1 | tee "$OUT/fig24a.txt" || true
fi
if has sweep; then
  specs=${SPECS:-$($PY -c "from opatlas.sweep.llm_catalog import llm_spec_names as n; print(*n())")}
  for spec in $specs; do
    t=$(left); [ "$t" -gt 20 ] || { echo "budget spent: stopping before $spec"; break; }
    echo "== $spec ($t s left)"
    timeout --signal=INT "$t" $PY -m opatlas run "$spec" --backend "$BACKEND" --store "$STORE" \
      --log-every 200 ${WHERE:+--where "$WHERE"} || echo "$spec stopped (rc $?); run again to go on"
  done 2>&1 | tee -a "$OUT/sweep.txt"
  cp "$STORE" "$OUT/"
fi
echo "done in $(( $(date +%s) - start )) s; files in $FINAL"
tar czf - -C "$OUT" . | split -b 15m - "$FINAL/gpu-session.tgz."
