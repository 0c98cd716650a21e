#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a while on a
# scratch copy of its seed corpus, so the committed seeds never change.
#
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]
#
# SECONDS per target (default 60); TARGETs are names like "safetensors" (default: every
# tests/fuzz/fuzz_*.cpp). Seeds: tests/fuzz/corpus/<target>/; dictionary, if any:
# tests/fuzz/<target>.dict. Crashing inputs are kept in build-fuzz/artifacts/<target>/;
# replay one with: build-fuzz/tests/fuzz/fuzz_<target> <file>.
# Env: VLLM_FUZZ_BUILD_DIR (default build-fuzz), VLLM_JOBS (default 2), FUZZ_WORKERS
# (parallel libFuzzer jobs per target, default 1).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

seconds=${1:-60}
shift || true
build=${VLLM_FUZZ_BUILD_DIR:-$root/build-fuzz}
jobs=${VLLM_JOBS:-2}
workers=${FUZZ_WORKERS:-1}

targets=("$@")
if ((${#targets[@]} == 0)); then
  for src in tests/fuzz/fuzz_*.cpp; do
    name=$(basename "$src" .cpp)
    targets+=("${name#fuzz_}")
  done
fi

if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DVLLM_FUZZ=ON -DVLLM_TESTS=OFF >/dev/null
fi
ninja -C "$build" -j"$jobs" "${targets[@]/#/fuzz_}"

scratch=$(mktemp -d "${TMPDIR:-/tmp}/vllm-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

for target in "${targets[@]}"; do
  echo "=== fuzz_$target for ${seconds}s"
  corpus="$scratch/$target"
  mkdir -p "$corpus" "$build/artifacts/$target"
  if [ -d "tests/fuzz/corpus/$target" ]; then cp -r "tests/fuzz/corpus/$target/." "$corpus/"; fi
  args=(-max_total_time="$seconds" -print_final_stats=1 -max_len=4096 -timeout=10
        -artifact_prefix="$build/artifacts/$target/")
  if [ -f "tests/fuzz/$target.dict" ]; then args+=(-dict="tests/fuzz/$target.dict"); fi
  if ((workers > 1)); then args+=(-fork="$workers"); fi
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    "$build/tests/fuzz/fuzz_$target" "${args[@]}" "$corpus"
done
echo "=== fuzzing clean: ${targets[*]}"
