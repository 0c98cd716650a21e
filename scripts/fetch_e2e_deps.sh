#!/usr/bin/env bash
# Installs the official `openai` npm client and the `ajv` JSON Schema validator the
# end-to-end server tests use, pinned in
# tests/e2e/package-lock.json, into tests/e2e/node_modules/ (git-ignored). Safe to rerun:
# nothing is fetched when the installed tree already matches the lock file.
set -euo pipefail
cd "$(dirname "$0")/../tests/e2e"
if [ -f node_modules/.package-lock.json ] && cmp -s package-lock.json node_modules/.vllm-lock; then
  echo "fetch_e2e_deps: up to date"
  exit 0
fi
npm ci --no-audit --no-fund --ignore-scripts
cp package-lock.json node_modules/.vllm-lock
