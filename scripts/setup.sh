#!/usr/bin/env bash
# Installs everything vllm.cpp needs to build and test on Debian 12. Safe to run again:
# it installs only what is missing and skips the package-list refresh when nothing is.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  clang libclang-rt-14-dev            # libFuzzer and sanitizer runtimes
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcpp-httplib-dev libpcre2-dev libicu-dev libopenblas-dev
  libcli11-dev libfmt-dev libspdlog-dev libxxhash-dev
  libboost-dev libssl-dev             # the HTTP server: Boost.Beast / Boost.Asio, TLS
  curl jq openssl                     # the end-to-end server tests (tests/e2e/)
  libcairo2-dev fonts-dejavu-core    # `vllm bench serve --plot`
  linux-perf                          # benchmarks/peers/step_profile.sh
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# Node.js and npm fetch the tokenizer test data and the openai client for the e2e tests;
# a machine that already has them from elsewhere keeps its own.
if ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
