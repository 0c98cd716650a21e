#!/usr/bin/env bash
# The main job: install dependencies, build, and run `vllm generate` on the CPU backend: over
# a small random-weight Llama checkpoint the build writes and the tiny Qwen3.5 MoE in
# tests/golden (token ids in and out), then, last, over the demo model shipped in
# models/qwen35-moe-demo (text in and out; the default model when --model is not given).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
jobs=${VLLM_JOBS:-2}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs" --target vllm make_tiny_checkpoint

# A small random-weight Llama written by the build, and the tiny Qwen3.5 MoE hybrid that
# tests/golden holds (random weights too, checked against transformers).
build/tests/tools/make_tiny_checkpoint build/tiny-llama --arch llama
for model in build/tiny-llama tests/golden/qwen3_5_moe; do
  echo "--- vllm generate --model $model"
  build/src/cli/vllm generate --model "$model" --prompt-ids 1,2,3,4,5 --prompt-ids 42,7 \
    --max-tokens 16 --temperature 0 --json
done

# The demo model (a 7.8M-parameter Qwen3.5 MoE hybrid trained on Python source; see its
# model card, models/qwen35-moe-demo/README.md): greedy continuation of a Python prompt.
echo "--- vllm generate --prompt 'def fibonacci(n):' (default model: models/qwen35-moe-demo)"
build/src/cli/vllm generate --prompt "def fibonacci(n):" --max-tokens 64 --temperature 0
