#!/usr/bin/env bash
# Downloads (does not install) the Debian packages the CUDA build and its tests need, into the
# git-ignored folder .debs/, for scripts/device_build.sh to unpack on a CUDA machine that has
# nvcc, CMake and ninja but neither the -dev packages nor network access.
#
# Runs on a Debian 12 machine with network (apt lists current: `apt-get update` first if
# apt-get download says it cannot find a package). The set is the dependency closure of the
# packages below minus what every glibc system already has (libc, libstdc++, the compiler
# runtime): those must not be unpacked next to the CUDA machine's own, newer ones. Safe to
# run again; it starts afresh.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/.debs"

# What the top-level CMakeLists.txt finds, and what the tests and `vllm bench --plot` use.
wanted=(
  nlohmann-json3-dev libfmt-dev libspdlog-dev
  libopenblas-dev libopenblas-pthread-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev libcpp-httplib-dev libpcre2-dev libxxhash-dev libicu-dev
  libcairo2-dev fonts-dejavu-core
)

# Base-system packages and unused alternatives: never shipped.
skip_regex='^(libc6|libc6-dev|libc-dev-bin|linux-libc-dev|libcrypt1|libcrypt-dev|libnsl2|libnsl-dev'
skip_regex+='|libtirpc[0-9]*|libtirpc-common|libtirpc-dev|rpcsvc-proto|libgcc-s1|libstdc\+\+6'
skip_regex+='|gcc-[0-9]+-base|libgomp1|libkrb5-3|libkrb5support0|libk5crypto3|libgssapi-krb5-2'
skip_regex+='|libcom-err2|libkeyutils1|catch2|googletest|libopenblas-openmp-dev'
skip_regex+='|libopenblas-serial-dev|libopenblas0-openmp|libopenblas0-serial|debconf|dpkg)$'

mapfile -t closure < <(
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances "${wanted[@]}" | grep -v '^[ <]' | sort -u)
packages=()
for p in "${closure[@]}"; do
  [[ "$p" =~ $skip_regex ]] || packages+=("$p")
done
if ((${#packages[@]} == 0)); then
  echo "fetch_device_debs: apt-cache found nothing; run 'apt-get update' first" >&2
  exit 1
fi

rm -rf "$dest"
mkdir -p "$dest"
echo "fetch_device_debs: ${#packages[@]} packages: ${packages[*]}"
(cd "$dest" && apt-get download -q "${packages[@]}")
du -sh "$dest"
