#!/usr/bin/env bash
# The main job: install dependencies, build, write a small random-weight Llama checkpoint and
# generate from it with `vllm generate` on the CPU backend.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
jobs=${VLLM_JOBS:-2}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs" --target vllm make_tiny_checkpoint

model=build/tiny-llama
build/tests/tools/make_tiny_checkpoint "$model" --arch llama
echo "--- vllm generate --model $model"
build/src/cli/vllm generate --model "$model" --prompt-ids 1,2,3,4,5 --prompt-ids 42,7 \
  --max-tokens 16 --json
