#!/usr/bin/env bash
# Sets up, builds and runs every test vllm.cpp has on a machine without a GPU:
#   1. Release build + unit tests (ctest)
#   1b. end-to-end tests of `vllm serve` (tests/e2e/run.sh: the openai npm client and curl;
#       run_ops.sh: TLS, CORS, Hugging Face ids, engine death; run_load.sh: 2,000 concurrent
#       connections and slow readers on the demo model)
#   2. AddressSanitizer + UndefinedBehaviorSanitizer build + unit tests, and the load test on
#      that build
#   3. CUDA backend compile (nvcc, sm_90 + PTX) when nvcc is installed; its tests skip
#      without a GPU (run them on a GPU machine with scripts/device_build.sh), while the
#      kernels that tests/cuda_emulation covers run on the CPU against the CPU ops
#   4. libFuzzer smoke run of every fuzz target (FUZZ_SECONDS each, default 20)
# Uses VLLM_JOBS parallel jobs (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
bash scripts/fetch_tokenizers.sh
bash scripts/fetch_e2e_deps.sh
jobs=${VLLM_JOBS:-2}
fuzz_seconds=${FUZZ_SECONDS:-20}
started=$(date +%s)

step() { echo; echo "=== $* ($(( $(date +%s) - started ))s)"; }

step "release build"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"
step "unit tests (release)"
ctest --test-dir build --output-on-failure -j"$jobs"
step "end-to-end server tests (release)"
VLLM_BUILD_DIR=build bash tests/e2e/run.sh
VLLM_BUILD_DIR=build bash tests/e2e/run_ops.sh
step "load test: 2,000 connections, slow readers (release)"
VLLM_BUILD_DIR=build bash tests/e2e/run_load.sh

step "ASan + UBSan build"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVLLM_SANITIZE=ON \
  -DVLLM_BENCHMARKS=OFF >/dev/null
cmake --build build-asan -j"$jobs" --target vllm_unit_tests
step "unit tests (ASan + UBSan)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs"
step "load test (ASan + UBSan)"
# The sanitizer's shadow memory and quarantine raise the resident-memory figures.
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  VLLM_LOAD_RSS_BOUND_MB=2048 VLLM_SLOW_RSS_BOUND_MB=256 VLLM_BUILD_DIR=build-asan \
  bash tests/e2e/run_load.sh

if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  step "CUDA backend compile"
  cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DVLLM_CUDA=ON >/dev/null
  cmake --build build-cuda -j"$jobs" --target vllm_backend_cuda vllm_cuda_tests \
    vllm_cuda_emulation_tests
  build-cuda/tests/vllm_cuda_tests --gtest_brief=1
  step "CUDA kernels emulated on the CPU"
  build-cuda/tests/vllm_cuda_emulation_tests --gtest_brief=1
else
  step "CUDA backend compile skipped: nvcc not found"
fi

if [ -x scripts/fuzz.sh ] || [ -f scripts/fuzz.sh ]; then
  step "fuzz smoke run (${fuzz_seconds}s per target)"
  bash scripts/fuzz.sh "$fuzz_seconds"
fi

step "all tests passed"
