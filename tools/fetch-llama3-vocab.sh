#!/bin/sh
# Fetches Llama 3's 128k vocabulary for the mask benchmark
# (shardline-bench-grammar --tiktoken, docs/benchmarks.md): the tiktoken
# ranks file llama_models/llama3/tokenizer.model (base64 piece and rank a
# line, 2.1 MB) inside Meta's PyPI wheel llama-models 0.3.0. The wheel is
# pinned and its sha256 checked, then only that file is unpacked (and
# checked too) into DIR. It is under Meta's Llama 3 license: never commit
# it; carry it to the machines that run the benchmark.
# Nothing is done when the file is already there and intact.
#
# Usage: tools/fetch-llama3-vocab.sh [DIR]      (default build/llama3)
#   SL_LLAMA_MODELS_WHEEL=/path/llama_models-0.3.0-py3-none-any.whl  use a
#     local copy of the wheel (it is checked all the same).
set -u
dir=${1:-build/llama3}
version=0.3.0
wheel_name=llama_models-$version-py3-none-any.whl
wheel_sha=7f77f78ff13fca09f70d76a376aff6414cd901623fb9d57e69c2f8367a73032f
member=llama_models/llama3/tokenizer.model
file_sha=82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55
out=$dir/tokenizer.model
wheel=$dir/$wheel_name

say() { echo "fetch-llama3-vocab: $*"; }
sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }
cannot() {
	say "cannot get $wheel_name: $*"
	say "where PyPI cannot be reached, copy the wheel here and run:"
	say "  SL_LLAMA_MODELS_WHEEL=/path/to/$wheel_name sh $0 $dir"
	exit 1
}

if sha_ok "$out" "$file_sha"; then
	say "$out present"
	exit 0
fi
mkdir -p "$dir" || cannot "cannot make $dir"
if [ -n "${SL_LLAMA_MODELS_WHEEL:-}" ]; then
	cp "$SL_LLAMA_MODELS_WHEEL" "$wheel" || cannot "cannot copy $SL_LLAMA_MODELS_WHEEL"
elif ! sha_ok "$wheel" "$wheel_sha"; then
	say "downloading llama-models==$version from PyPI (6.6 MB, no dependencies)"
	rm -f "$wheel"
	python3 -m pip download -q --no-deps --only-binary=:all: --dest "$dir" \
		"llama-models==$version" || cannot "pip download failed (no network?)"
fi
sha_ok "$wheel" "$wheel_sha" || { rm -f "$wheel"; cannot "its sha256 is not $wheel_sha"; }
python3 - "$wheel" "$member" "$out.part" <<'PY' || cannot "cannot unpack $member"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
if ! sha_ok "$out.part" "$file_sha"; then
	rm -f "$out.part"
	cannot "the unpacked file's sha256 is not $file_sha"
fi
mv "$out.part" "$out" && say "$out ready ($(wc -c <"$out") bytes)"
