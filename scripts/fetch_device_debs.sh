#!/usr/bin/env bash
# Prepares the build dependencies for a CUDA machine that has nvcc, CMake and ninja but no
# network and no Debian -dev packages: downloads (does not install) the Debian 12 packages the
# CUDA build and its tests need, unpacks them into a private prefix, drops what the build does
# not use (static libraries other than GoogleTest's, documentation, LAPACK) and packs the
# prefix into .debs/prefix.tar.xz (git-ignored; about 17 MB). scripts/device_test.sh unpacks
# it there. Packages every glibc system has (libc, libstdc++, the compiler runtime) are not
# included: the target machine's own, newer ones are used.
#
# Runs on Debian 12 with current apt lists (`apt-get update` first if a download fails).
# Safe to run again; it starts afresh.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/.debs"
packages=(
  nlohmann-json3-dev libfmt-dev libfmt9 libspdlog-dev libspdlog1.10
  libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0 libgfortran5
  libquadmath0 libgtest-dev libgmock-dev libcli11-dev libcpp-httplib-dev libcpp-httplib0.11
  libssl-dev libssl3 zlib1g-dev libbrotli-dev libbrotli1
  libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
  libxxhash-dev libxxhash0 libicu-dev libicu72
)

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download -q "${packages[@]}")
mkdir -p "$work/root"
for deb in "$work"/*.deb; do dpkg -x "$deb" "$work/root"; done
lib="$work/root/usr/lib/x86_64-linux-gnu"
find "$work/root" -name '*.a' ! -name 'libgtest*.a' ! -name 'libgmock*.a' -delete
rm -rf "$work/root/usr/share/doc" "$work/root/usr/share/man" "$work/root/usr/share/lintian" \
  "$lib"/openblas-pthread/liblapack.so* "$lib"/openblas-pthread/libblas.so*
rm -rf "$dest"
mkdir -p "$dest"
tar cJf "$dest/prefix.tar.xz" -C "$work/root" .
du -sh "$dest/prefix.tar.xz"
