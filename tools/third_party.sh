#!/bin/sh
# Builds the third-party code shardline links but does not commit: today the
# C++ core of xgrammar (Apache-2.0), the grammar engine behind constrained
# decoding (grammar/, issue 37). Its PyPI sdist is pinned by version and
# sha256, downloaded once (or taken from a local copy), unpacked under DIR
# and its cpp/ compiled with g++ -std=c++17 -O2 into DIR/lib/libxgrammar.a.
# Only the C++ core: no Python bindings (cpp/tvm_ffi), no cpptrace, no tests.
# Nothing is done when the library is already there.
#
# Usage: tools/third_party.sh [DIR]         (default build/third_party)
#   SL_XGRAMMAR_SDIST=/path/xgrammar-0.2.9.tar.gz  use a local copy of the
#     sdist instead of downloading it (it is checked all the same).
#   JOBS=N  compile N files at once (default: the number of CPUs).
set -u
dir=${1:-build/third_party}
version=0.2.9
name=xgrammar-$version
sha=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90
url=https://files.pythonhosted.org/packages/3a/2f/5bf8e8fa6619cff534932f79b0abc81a417d354bc5093252c1a6081d0a93/$name.tar.gz
tarball=$dir/$name.tar.gz
src=$dir/$name
lib=$dir/lib/libxgrammar.a
CXX=${CXX:-g++}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}

say() { echo "third_party: $*"; }
die() { say "$*"; exit 1; }
sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

[ -f "$lib" ] && [ -f "$src/.unpacked" ] && exit 0
mkdir -p "$dir/lib" || die "cannot make $dir"

if [ -n "${SL_XGRAMMAR_SDIST:-}" ]; then
	cp "$SL_XGRAMMAR_SDIST" "$tarball" || die "cannot copy $SL_XGRAMMAR_SDIST"
elif ! sha_ok "$tarball" "$sha"; then
	say "downloading $name.tar.gz from PyPI (2.7 MB)"
	curl -fsSL --retry 3 -o "$tarball.part" "$url" && mv "$tarball.part" "$tarball" ||
		die "download failed (no network?); copy the sdist and run SL_XGRAMMAR_SDIST=/path/$name.tar.gz $0"
fi
sha_ok "$tarball" "$sha" || { rm -f "$tarball"; die "$tarball: sha256 mismatch (want $sha)"; }

if [ ! -f "$src/.unpacked" ]; then
	rm -rf "$src"
	tar xzf "$tarball" -C "$dir" "$name/cpp" "$name/include" "$name/3rdparty/picojson" \
		"$name/3rdparty/dlpack/include" "$name/LICENSE" "$name/NOTICE" || die "cannot unpack $tarball"
	touch "$src/.unpacked"
fi

# The core's sources: cpp/, its support/ and converter_ext/, not the bindings.
obj=$dir/obj/$name
mkdir -p "$obj"
start=$(date +%s)
say "compiling $name (C++ core, $jobs at once)"
find "$src/cpp" -name '*.cc' ! -path '*/tvm_ffi/*' | sort | xargs -P "$jobs" -I{} sh -c '
	o="$0/$(echo "{}" | sed "s|.*/cpp/||; s|/|_|g; s|\.cc$|.o|")"
	[ -f "$o" ] && [ "$o" -nt "{}" ] && exit 0
	'"$CXX"' -std=c++17 -O2 -fPIC -DNDEBUG -DXGRAMMAR_ENABLE_CPPTRACE=0 -w \
		-I"$1/include" -I"$1/3rdparty/picojson" -I"$1/3rdparty/dlpack/include" \
		-c "{}" -o "$o.tmp" && mv "$o.tmp" "$o" || { echo "third_party: failed: {}" >&2; exit 255; }
' "$obj" "$src" || die "compiling $name failed"
rm -f "$lib" && ar rcs "$lib" "$obj"/*.o || die "cannot archive $lib"
say "$lib: $(du -k "$lib" | cut -f1) KiB, $(($(date +%s) - start)) s"
