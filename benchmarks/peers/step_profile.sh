#!/usr/bin/env bash
# Where a decode step of the demo model goes: CPU milliseconds per step by kind of work, one
# thread, from perf samples. Two runs that differ only in the number of tokens generated
# (128 prompt ids; 64 and 320 tokens) are sampled and subtracted, so start-up, loading and
# prefill cancel and what remains is 256 decode steps at contexts 192..448 (the peer
# benchmark's range). User-space CPU time of the process, not wall time, so other work on
# the machine does not count (it still evicts caches: compare runs taken side by side).
# Kernel time is left out: start-up page faults vary more between runs than a step lasts.
#
#   bash benchmarks/peers/step_profile.sh OUT_DIR [DRIVER]
#
# DRIVER: a vllm_peer_driver binary (default: the one in VLLM_BUILD_DIR, default build/), so
# that two builds can be compared. Needs perf (Debian: linux-perf). OUT_DIR keeps the perf
# data and per-symbol reports. ROUNDS (default 3) pairs of runs are summed.
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: bash benchmarks/peers/step_profile.sh OUT_DIR [DRIVER]" >&2
  exit 2
fi
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
out_dir="$(mkdir -p "$1" && cd "$1" && pwd)"
BUILD="${VLLM_BUILD_DIR:-$ROOT/build}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
DRIVER="${2:-$BUILD/benchmarks/peers/vllm_peer_driver}"
ROUNDS="${ROUNDS:-3}"
FREQ=10000
SHORT=64
LONG=320
command -v perf >/dev/null || { echo "step_profile: perf not found (Debian: linux-perf)" >&2; exit 1; }
[ -x "$DRIVER" ] || { echo "step_profile: no driver at $DRIVER" >&2; exit 1; }

export VLLM_LOGGING_LEVEL=warning
for round in $(seq 1 "$ROUNDS"); do
  for gen in "$SHORT" "$LONG"; do
    data="$out_dir/steps_${gen}_$round.data"
    perf record -q -e cpu-clock:u -F "$FREQ" -o "$data" "$DRIVER" --model "$ROOT/models/qwen35-moe-demo" \
      --threads 1 --gen "$gen" --prompt-len 128 >/dev/null 2>&1
    perf report -i "$data" --no-children --sort symbol -n --stdio 2>/dev/null |
      grep -E '^ +[0-9]' >"$out_dir/steps_${gen}_$round.txt"
  done
done

# Per-symbol sample counts of the long runs minus the short ones, summed by category (the
# first pattern a symbol matches), in ms per decode step.
cat "$out_dir"/steps_"$SHORT"_*.txt | sed 's/^/S /' >"$out_dir/steps_all.txt"
cat "$out_dir"/steps_"$LONG"_*.txt | sed 's/^/L /' >>"$out_dir/steps_all.txt"
awk -v freq="$FREQ" -v steps=$(((LONG - SHORT) * ROUNDS)) '
  BEGIN {
    n = split("linear|attention|gdn_rule|gdn_other|moe|norm_rope|sampler|alloc|other", order, "|")
    label["linear"] = "linear (GEMV / GEMM kernels, weight widening)"
    label["attention"] = "paged attention"
    label["gdn_rule"] = "Gated DeltaNet recurrence"
    label["gdn_other"] = "Gated DeltaNet conv1d, gating, gated norm"
    label["moe"] = "MoE routing, gather, combine"
    label["norm_rope"] = "norms, RoPE, element-wise"
    label["sampler"] = "sampler (argmax, logprob)"
    label["alloc"] = "malloc / free"
    label["other"] = "other (engine, op checks, tensors, threads)"
  }
  function category(sym) {
    if (sym ~ /linear|tile|direct_rows|rows_bf16|sgemm|decode_to_f32|pair_columns|openblas|_kernel/) return "linear"
    if (sym ~ /paged_attention|attention_row/) return "attention"
    if (sym ~ /gated_delta_rule|delta_rule_step|l2_normalize/) return "gdn_rule"
    if (sym ~ /causal_conv1d|gdn_gating|gated_rms_norm/) return "gdn_other"
    if (sym ~ /moe|top_k|softmax/) return "moe"
    if (sym ~ /rms_norm|rotary|rope|silu|add_inplace|sigmoid|split_q_gate|expf/) return "norm_rope"
    if (sym ~ /argmax|logprob|sample|sum_exp|max_logit/) return "sampler"
    if (sym ~ /malloc|free|_int_|unlink_chunk|operator new|operator delete/) return "alloc"
    return "other"
  }
  {
    sign = $1 == "L" ? 1 : -1
    count = $3
    sym = ""; for (i = 5; i <= NF; ++i) sym = sym " " $i
    c = category(sym)
    total[c] += sign * count; all += sign * count
  }
  END {
    printf "%-48s %8.3f\n", "user CPU ms per decode step (1 thread)", all / freq / steps * 1e3
    for (i = 1; i <= n; ++i) {
      c = order[i]
      printf "  %-46s %8.3f\n", label[c], total[c] / freq / steps * 1e3
    }
  }' "$out_dir/steps_all.txt"
