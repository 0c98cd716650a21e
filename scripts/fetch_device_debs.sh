#!/usr/bin/env bash
# Prepares the build dependencies for a CUDA machine that has nvcc, CMake and ninja but no
# network and no Debian -dev packages: downloads (does not install) the Debian 12 packages the
# CUDA build and its tests need, unpacks them into a private prefix, drops what the build does
# not use (static libraries other than GoogleTest's, documentation, LAPACK, the Boost headers
# no source includes) and packs the prefix into .debs/prefix.tar.xz (git-ignored; about 20 MB).
# scripts/device_test.sh unpacks it there. Packages every glibc system has (libc, libstdc++,
# the compiler runtime) are not included: the target machine's own, newer ones are used.
#
# Boost is header-only here but 160 MB of headers: only those the sources reach are kept. They
# are what the preprocessor reads (`-M`) for every file that includes a Boost header, with the
# prefix's headers first on the path, under each C++ compiler found here, with and without
# NDEBUG; the build's own definitions only ever turn includes off, so they are left out.
#
# Runs on Debian 12 with current apt lists (`apt-get update` first if a download fails) and a
# C++ compiler. Safe to run again; it starts afresh.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/.debs"
packages=(
  nlohmann-json3-dev libfmt-dev libfmt9 libspdlog-dev libspdlog1.10
  libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0 libgfortran5
  libquadmath0 libgtest-dev libgmock-dev libcli11-dev libcpp-httplib-dev libcpp-httplib0.11
  libssl-dev libssl3 zlib1g-dev libbrotli-dev libbrotli1
  libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
  libxxhash-dev libxxhash0 libicu-dev libicu72 libboost1.74-dev
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
# Debian keeps OpenSSL's two configuration headers in the multiarch include folder, which is a
# compiler default for /usr but not for the prefix: they join the others in include/openssl.
mv "$work/root/usr/include/x86_64-linux-gnu/openssl/"*.h "$work/root/usr/include/openssl/"
rmdir "$work/root/usr/include/x86_64-linux-gnu/openssl"

# The Boost headers the sources reach (see the top).
inc="$work/root/usr/include"
mapfile -t users < <(cd "$root" && grep -rlE '^#include <boost/' src tests \
  --include='*.cpp' --include='*.h' --include='*.cc' --include='*.hpp' | sort)
if ((${#users[@]} == 0)); then
  echo "fetch_device_debs: no source includes Boost; dropping its headers" >&2
fi
compilers=()
for cxx in g++ clang++; do command -v "$cxx" >/dev/null && compilers+=("$cxx"); done
((${#compilers[@]} > 0)) || { echo "fetch_device_debs: no C++ compiler" >&2; exit 1; }
: >"$work/boost_headers"
for file in "${users[@]}"; do
  for cxx in "${compilers[@]}"; do
    for defs in "" "-DNDEBUG"; do
      # shellcheck disable=SC2086
      "$cxx" -std=c++20 $defs -x c++ -M -isystem "$inc" -isystem "$inc/x86_64-linux-gnu" \
        -I"$root/src" -I"$root/include" "$root/$file" -o "$work/deps" ||
        { echo "fetch_device_debs: $cxx -M $file failed" >&2; exit 1; }
      tr -s ' ' '\n' <"$work/deps" | { grep -F "$inc/boost/" || true; } |
        xargs -r realpath -m --relative-to="$inc" >>"$work/boost_headers"
    done
  done
done
sort -u -o "$work/boost_headers" "$work/boost_headers"
mkdir -p "$work/kept"
(cd "$inc" && xargs -r cp --parents -t "$work/kept" <"$work/boost_headers")
rm -rf "$inc/boost"
[ -d "$work/kept/boost" ] && mv "$work/kept/boost" "$inc/boost"
echo "fetch_device_debs: kept $(wc -l <"$work/boost_headers") Boost headers" \
  "($(du -sh "$inc/boost" 2>/dev/null | cut -f1)) for ${#users[@]} files: ${users[*]}"
rm -rf "$dest"
mkdir -p "$dest"
tar cJf "$dest/prefix.tar.xz" -C "$work/root" .
du -sh "$dest/prefix.tar.xz"
