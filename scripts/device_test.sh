#!/usr/bin/env bash
# Builds vllm.cpp with the CUDA backend on a CUDA machine and runs every CUDA test: the kernel
# parity tests, the models against their golden references and the engine on the GPU
# (tests/cuda, binary vllm_cuda_tests), then the CPU unit tests.
#
#   bash scripts/device_test.sh OUT_DIR [gtest filter for the CUDA tests]
#
# The machine needs nvcc, CMake and ninja. It may have no network and no Debian -dev packages:
# the packages the build needs can come packed in .debs/prefix.tar.xz
# (scripts/fetch_device_debs.sh makes it on a Debian 12 machine); it is unpacked into a
# private prefix, never into /, found through CMAKE_PREFIX_PATH, and its shared libraries
# reach the test binaries through LD_LIBRARY_PATH only. Without it the system's packages are
# used.
#
# Logs go to OUT_DIR (build.log, cuda_tests.log, unit_tests.log, summary.txt). Exits non-zero
# when the build fails, a test fails or crashes, or a stage times out.
set -uo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 OUT_DIR [CUDA test filter]" >&2
  exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(mkdir -p "$1" && cd "$1" && pwd)"
filter="${2:-*}"
cd "$root"
build="$root/build-device"
prefix="${VLLM_DEB_PREFIX:-/tmp/vllm-debroot}"
jobs="$(nproc)"
export PATH="/usr/local/cuda/bin:$PATH"
failed=0
summary=()
note() { summary+=("$*"); echo "== $*"; }

echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv || true
nvcc --version | tail -2 || true

cmake_extra=()
run_path=""
if [ -f .debs/prefix.tar.xz ]; then
  if [ ! -f "$prefix/.unpacked" ] || [ .debs/prefix.tar.xz -nt "$prefix/.unpacked" ]; then
    rm -rf "$prefix" && mkdir -p "$prefix"
    tar xJf .debs/prefix.tar.xz -C "$prefix"
    # Links to absolute paths (libz.so -> /lib/...) point into the prefix instead.
    find "$prefix" -type l -lname '/*' | while read -r link; do
      ln -sfn "$prefix$(readlink "$link")" "$link"
    done
    touch "$prefix/.unpacked"
  fi
  libdir="$prefix/usr/lib/x86_64-linux-gnu"
  blasdir="$libdir/openblas-pthread"
  run_path="$libdir:$blasdir"
  cmake_extra=(-DCMAKE_PREFIX_PATH="$prefix/usr" -DCMAKE_LIBRARY_PATH="$blasdir;$libdir"
               -DBLA_VENDOR=OpenBLAS -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$run_path"
               -DCMAKE_SHARED_LINKER_FLAGS="-Wl,-rpath-link,$run_path"
               -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
fi

# The build runs test binaries too (gtest discovery): they need the prefix's libraries.
[ -n "$run_path" ] && export LD_LIBRARY_PATH="$run_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "== configure + build ($jobs jobs)"
start=$(date +%s)
if ! cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVLLM_CUDA=ON \
    -DVLLM_BENCHMARKS=OFF "${cmake_extra[@]}" >"$out/build.log" 2>&1; then
  tail -30 "$out/build.log"
  echo "configure failed"
  exit 1
fi
targets=(vllm_cuda_tests vllm)
[ "${VLLM_SKIP_CPU_TESTS:-0}" != 1 ] && targets+=(vllm_unit_tests)
if ! timeout 900 ninja -C "$build" -j "$jobs" "${targets[@]}" >>"$out/build.log" 2>&1; then
  grep -E "error|FAILED" "$out/build.log" | head -40
  echo "build failed"
  exit 1
fi
note "build: $(( $(date +%s) - start )) s"

# A gtest run: non-zero on failure, crash or timeout; the result line goes to the summary.
run_tests() {
  local name="$1" limit="$2" log="$3"
  shift 3
  local start rc
  start=$(date +%s)
  timeout "$limit" "$@" >"$log" 2>&1
  rc=$?
  local result
  result="$(grep -E '^\[  (PASSED|FAILED)  \]' "$log" | tr '\n' ' ')"
  if [ $rc -ne 0 ]; then
    failed=1
    [ $rc -eq 124 ] && result="TIMED OUT after ${limit}s; $result"
    [ $rc -gt 128 ] && result="CRASHED (signal $((rc - 128))); $result"
    grep -E '^\[  FAILED  \]|Failure|error' "$log" | head -30
  fi
  note "$name: rc $rc, $(( $(date +%s) - start )) s: $result"
}

run_tests "CUDA tests" 420 "$out/cuda_tests.log" "$build/tests/vllm_cuda_tests" \
  --gtest_filter="$filter" --gtest_brief=0
if [ "${VLLM_SKIP_CPU_TESTS:-0}" != 1 ]; then
  # The CPU suite stays on the CPU: no GPU visible to it.
  run_tests "CPU unit tests" 420 "$out/unit_tests.log" env CUDA_VISIBLE_DEVICES= \
    "$build/tests/vllm_unit_tests" --gtest_brief=1
fi

echo
echo "== summary"
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
grep -E "^(llama|qwen|demo)" "$out/cuda_tests.log" | head -20 || true
exit $failed
