#!/usr/bin/env bash
# A kernel timeline of one run of a CUDA program, CUDA-graph replays included, from CUPTI's
# activity records (no Nsight Systems needed): builds scripts/cuda_trace/trace_shim.cpp against
# the CUDA toolkit's CUPTI, runs the command with it preloaded, and reports where a decode
# step's time goes (scripts/cuda_trace/analyze.py).
#
#   bash scripts/cuda_trace.sh OUT_DIR COMMAND [ARG ...]
#
# For example, one batch-1 decode of 23 graph-replayed steps:
#   bash scripts/cuda_trace.sh OUT build-device/src/cli/vllm bench latency \
#     --model configs/Qwen3.5-4B --load-format dummy --max-model-len 4096 --batch-size 1 \
#     --input-len 1024 --output-len 24 --num-iters-warmup 0 --num-iters 1
#
# Tracing adds host time between steps (the replay-to-replay time grows), not inside a replay:
# compare a replay's span with `vllm bench latency`'s step time. Environment: CUDA_HOME (default
# /usr/local/cuda), the toolkit whose CUPTI header and library are used. Writes
# OUT_DIR/trace.csv (a row per kernel), OUT_DIR/summary.txt (the report, also printed) and
# OUT_DIR/command.log (the command's output). Exits with the command's status, or 1 if the
# shim cannot be built.
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 OUT_DIR COMMAND [ARG ...]" >&2
  exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(mkdir -p "$1" && cd "$1" && pwd)"
shift
cuda="${CUDA_HOME:-/usr/local/cuda}"
inc=""
for d in "$cuda/include" "$cuda/extras/CUPTI/include"; do
  [ -f "$d/cupti.h" ] && inc="$d" && break
done
lib=""
for d in "$cuda/lib64" "$cuda/lib" "$cuda/extras/CUPTI/lib64"; do
  [ -e "$d/libcupti.so" ] && lib="$d" && break
done
if [ -z "$inc" ] || [ -z "$lib" ]; then
  echo "no CUPTI header or library under $cuda (set CUDA_HOME)" >&2
  exit 1
fi
if ! g++ -std=c++17 -O2 -shared -fPIC -o "$out/libvllm_trace.so" \
    "$root/scripts/cuda_trace/trace_shim.cpp" -I"$inc" -L"$lib" -lcupti -Wl,-rpath,"$lib"; then
  echo "building the trace shim failed" >&2
  exit 1
fi
VLLM_TRACE_OUT="$out/trace.csv" LD_PRELOAD="$out/libvllm_trace.so${LD_PRELOAD:+:$LD_PRELOAD}" \
  "$@" >"$out/command.log" 2>&1
rc=$?
grep "^cuda_trace:" "$out/command.log" >&2
python3 "$root/scripts/cuda_trace/analyze.py" "$out/trace.csv" | tee "$out/summary.txt"
exit $rc
