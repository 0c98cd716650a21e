#!/usr/bin/env bash
# Sets up, builds and runs every test vllm.cpp has on a machine without a GPU:
#   1. Release build + unit tests (ctest). Where nvcc is installed the release build includes
#      the CUDA backend (sm_90 + PTX), so it is compiled once with everything else: the
#      kernels that tests/cuda_emulation covers run on the CPU against the CPU ops (ctest
#      label cuda_emulation), and the CUDA tests (label cuda) are left out of ctest because
#      without a GPU they skip by design; their binary is run once to show that it loads and
#      skips cleanly. On a CUDA machine, scripts/device_test.sh OUT_DIR builds and runs them.
#   1b. end-to-end tests of `vllm serve` (tests/e2e/run.sh: the openai npm client and curl;
#       run_ops.sh: TLS, CORS, Hugging Face ids, engine death; run_load.sh: 2,000 concurrent
#       connections and slow readers on the demo model)
#   2. AddressSanitizer + UndefinedBehaviorSanitizer build (CPU only) + unit tests
#   2b. the end-to-end server tests and the load test again, against the sanitizer build
#   3. libFuzzer smoke run of every fuzz target (FUZZ_SECONDS each, default 20)
# Uses VLLM_JOBS parallel jobs (default 2). Every stage is required: a missing one (a unit
# test that skips itself for lack of its data, the fuzz script) fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
bash scripts/fetch_tokenizers.sh
bash scripts/fetch_e2e_deps.sh
jobs=${VLLM_JOBS:-2}
fuzz_seconds=${FUZZ_SECONDS:-20}
started=$(date +%s)

step() { echo; echo "=== $* ($(( $(date +%s) - started ))s)"; }
# ctest reports a GTEST_SKIP()ped test as passed. Here every test has what it needs
# (setup.sh, fetch_tokenizers.sh), so a skipped test is a stage gone missing: fail. The CUDA
# tests (label cuda) skip without a GPU by design, so they are left out (-LE); the CUDA
# emulation tests (label cuda_emulation) run on the CPU and count.
run_ctest() {  # run_ctest BUILD_DIR [ENV=VALUE...]
  local dir=$1
  shift
  env "$@" ctest --test-dir "$dir" -LE '^cuda$' --output-on-failure -j"$jobs" \
    | tee "$dir/ctest.log"
  if grep -q '(Skipped)' "$dir/ctest.log"; then
    echo "test.sh: tests skipped in $dir (their data or a dependency is missing):"
    grep '(Skipped)' "$dir/ctest.log"
    exit 1
  fi
}
sanitizer_env=(ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
               UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1)

with_cuda=1
if command -v nvcc >/dev/null 2>&1; then
  cuda_flags=(-DVLLM_CUDA=ON)
elif [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda_flags=(-DVLLM_CUDA=ON -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
else
  with_cuda=0
  cuda_flags=(-DVLLM_CUDA=OFF)
fi

if ((with_cuda)); then
  step "release build, with the CUDA backend"
else
  step "release build (nvcc not found: no CUDA backend)"
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_flags[@]}" >/dev/null
cmake --build build -j"$jobs"
step "unit tests (release)"
run_ctest build
if ((with_cuda)); then
  step "CUDA tests binary (skips without a GPU)"
  # It must load and run; each skip prints a line, so only the summary is shown on success.
  if ! build/tests/vllm_cuda_tests --gtest_brief=1 >build/cuda_tests.log 2>&1; then
    cat build/cuda_tests.log
    exit 1
  fi
  grep -E '^\[ *(=+|PASSED|SKIPPED|FAILED) *\]' build/cuda_tests.log
fi
step "end-to-end server tests (release)"
VLLM_BUILD_DIR=build bash tests/e2e/run.sh
VLLM_BUILD_DIR=build bash tests/e2e/run_ops.sh
step "load test: 2,000 connections, slow readers (release)"
VLLM_BUILD_DIR=build bash tests/e2e/run_load.sh

step "ASan + UBSan build"
# -O1 -g1 (line tables: the reports keep file:line): GCC compiles the sanitized Boost.Beast
# session code about 3x faster than at RelWithDebInfo's -O2 -g, the larger part of this run.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVLLM_SANITIZE=ON \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DVLLM_CUDA=OFF -DVLLM_BENCHMARKS=OFF >/dev/null
cmake --build build-asan -j"$jobs" --target vllm_unit_tests
step "unit tests (ASan + UBSan)"
run_ctest build-asan "${sanitizer_env[@]}"
step "end-to-end server tests (ASan + UBSan)"
env "${sanitizer_env[@]}" VLLM_BUILD_DIR=build-asan bash tests/e2e/run.sh
step "load test (ASan + UBSan)"
# The sanitizer's shadow memory and quarantine raise the resident-memory figures; its default
# 256 MiB quarantine of freed blocks alone filled the slow-reader test's bound (freed event
# buffers held back, not answers buffered: the release build's run holds that bound at 64 MiB),
# so this run keeps a smaller quarantine.
ASAN_OPTIONS=detect_leaks=1:quarantine_size_mb=64 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  VLLM_LOAD_RSS_BOUND_MB=2048 VLLM_SLOW_RSS_BOUND_MB=256 VLLM_BUILD_DIR=build-asan \
  bash tests/e2e/run_load.sh

step "fuzz smoke run (${fuzz_seconds}s per target)"
bash scripts/fuzz.sh "$fuzz_seconds"

step "all tests passed"
