#!/usr/bin/env bash
# Builds vllm.cpp with the CUDA backend on a CUDA machine without network access and runs the
# CPU unit tests, the CUDA parity tests and the kernel timings, in one go.
#
#   bash scripts/device_build.sh [OUT_DIR]
#
# Needs: the CUDA toolkit (nvcc; compute-sanitizer and cuobjdump are used when present),
# CMake, ninja and a C++20 compiler on the machine, plus the Debian 12 packages the build
# links against, brought along as .deb files in .debs/ (scripts/fetch_device_debs.sh
# downloads them on a machine with network). They are unpacked with `dpkg -x` (or `ar` +
# `tar`) into a private prefix under the build folder, never into /, and found through
# CMAKE_PREFIX_PATH; their shared libraries reach the test binaries through LD_LIBRARY_PATH
# only, so the machine's own tools never load them. Logs and the summary go to OUT_DIR
# (default build-device/logs). Exits non-zero when a build or a test fails.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="$root/build-device"
prefix="$build/debroot"
out="${1:-$build/logs}"
mkdir -p "$build" "$out"
jobs="$(nproc)"
export PATH="/usr/local/cuda/bin:$PATH"  # nvcc, compute-sanitizer, cuobjdump

echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv || true
nvcc --version | tail -2 || true
cmake --version | head -1
c++ --version | head -1
grep PRETTY_NAME /etc/os-release || true

echo "== unpacking $(ls .debs/*.deb 2>/dev/null | wc -l) packages into $prefix"
if ! ls .debs/*.deb >/dev/null 2>&1; then
  echo "no .debs/*.deb: run scripts/fetch_device_debs.sh on a machine with network and bring .debs/ along" >&2
  exit 1
fi
rm -rf "$prefix"
mkdir -p "$prefix"
for deb in .debs/*.deb; do
  if command -v dpkg-deb >/dev/null; then
    dpkg -x "$deb" "$prefix"
  else  # a .deb is an ar archive holding data.tar.*
    tmp="$(mktemp -d)"
    (cd "$tmp" && ar x "$root/$deb" && tar -xf data.tar.* -C "$prefix")
    rm -rf "$tmp"
  fi
done
# Some packages link to absolute paths (libz.so -> /lib/...): point those into the prefix.
find "$prefix" -type l -lname '/*' | while read -r link; do
  ln -sfn "$prefix$(readlink "$link")" "$link"
done
libdir="$prefix/usr/lib/x86_64-linux-gnu"
blasdir="$libdir/openblas-pthread"
# Debian points libblas.so/libopenblas.so.0 at OpenBLAS through update-alternatives, which
# dpkg -x does not run; the pthread flavour's own directory holds real files and links.
run_path="$libdir:$blasdir:$prefix/lib/x86_64-linux-gnu"

echo "== configure"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVLLM_CUDA=ON \
  -DCMAKE_PREFIX_PATH="$prefix/usr" \
  -DCMAKE_LIBRARY_PATH="$blasdir;$libdir" \
  -DBLA_VENDOR=OpenBLAS \
  -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$run_path" \
  -DCMAKE_SHARED_LINKER_FLAGS="-Wl,-rpath-link,$run_path" \
  -DCMAKE_POLICY_VERSION_MINIMUM=3.5 2>&1 | tee "$out/build.log"
if [ "${PIPESTATUS[0]}" -ne 0 ]; then
  echo "configure failed (see build.log)"
  exit 1
fi

echo "== build"
# -k 0: a broken unit test elsewhere must not stop the CUDA tests from building.
ninja -C "$build" -j "$jobs" -k 0 vllm_cuda_tests vllm_unit_tests >>"$out/build.log" 2>&1
echo "ninja exit $?"
grep -E "error|warning:|FAILED" "$out/build.log" | head -60

export LD_LIBRARY_PATH="$run_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cuda_tests="$build/tests/vllm_cuda_tests"
unit_tests="$build/tests/vllm_unit_tests"
summary=()

if [ -x "$cuda_tests" ]; then
  echo "== CUDA parity tests"
  timeout 300 "$cuda_tests" 2>&1 | tee "$out/cuda_tests.log" | tail -40
  summary+=("vllm_cuda_tests: $(grep -E '^\[  (PASSED|FAILED) ' "$out/cuda_tests.log" | tr '\n' ' ')")
  if command -v compute-sanitizer >/dev/null; then
    echo "== compute-sanitizer memcheck (strided, aliasing, long rows, many rows)"
    timeout 240 compute-sanitizer --tool memcheck --leak-check no "$cuda_tests" \
      --gtest_filter='NormCuda.StridedAndUnalignedSlices:NormCuda.OutputMayAliasInput:NormCuda.LongRows:NormCuda.ManyRows' \
      2>&1 | tee "$out/memcheck.log" | tail -8
    summary+=("memcheck: $(grep -E 'ERROR SUMMARY' "$out/memcheck.log" | tail -1)")
  fi
  if command -v cuobjdump >/dev/null; then
    cuobjdump --dump-sass "$build/src/backend/cuda/libvllm_backend_cuda.a" >"$out/norm_sass.txt" 2>&1
    summary+=("SASS: $(grep -c 'LDG.E.128' "$out/norm_sass.txt") LDG.E.128, $(grep -c 'STG.E.128' "$out/norm_sass.txt") STG.E.128, $(grep -cE '\bLDL|\bSTL' "$out/norm_sass.txt") local-memory ops")
  fi
else
  summary+=("vllm_cuda_tests: did not build (see build.log)")
fi

if [ -x "$unit_tests" ]; then
  echo "== CPU unit tests"
  timeout 300 "$unit_tests" 2>&1 | tee "$out/unit_tests.log" | tail -15
  summary+=("vllm_unit_tests: $(grep -E '^\[  (PASSED|FAILED) ' "$out/unit_tests.log" | tr '\n' ' ')")
else
  summary+=("vllm_unit_tests: did not build (see build.log)")
fi

if [ -x "$cuda_tests" ]; then
  echo "== timings"
  VLLM_BENCH=1 timeout 240 "$cuda_tests" --gtest_filter='NormCudaBench.*' 2>&1 |
    tee "$out/bench.log" | grep -E '^\|' >"$out/bench_table.txt"
fi

echo "== summary"
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
cat "$out/bench_table.txt" 2>/dev/null
if printf '%s\n' "${summary[@]}" | grep -qE 'FAILED|did not build|ERROR SUMMARY: [1-9]'; then
  exit 1
fi
