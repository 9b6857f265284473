#!/bin/sh
# Makes a relocatable tree for GPU nodes without the build's libraries:
#   OUT/bin/*        the binaries
#   OUT/tests/*      the test binaries make test-gpu runs (GPU and MPI
#                    tests; the CPU-only suites stay behind), when built
#   OUT/lib/*.so*    every non-system shared library they load
#   OUT/env.sh       source it to set LD_LIBRARY_PATH
#   OUT/bench/*      shardline-bench-grammar's inputs: the 50 test schemas,
#                    the benchmark grammars and the summary script (the
#                    128k Llama 3 vocabulary is not in the tree: carry it,
#                    docs/benchmarks.md says how to get it)
# Left out, because a GPU node has its own and they must match its driver
# and mpirun: libc and the compiler runtime, CUDA (cudart, cuBLAS, cuRAND),
# NCCL and Open MPI. Debug info is stripped (CUDA line info stays), which
# keeps the tree small enough to copy to nodes that cannot build.
# Usage: tools/bundle.sh BUILD_DIR OUT_DIR
set -eu
build=$1; out=$2
rm -rf "$out"; mkdir -p "$out/bin" "$out/lib"
cp "$build"/bin/* "$out/bin/"
mkdir -p "$out/tests"
for d in "$build/tests/gpu" "$build/tests/mpi"; do
	[ -d "$d" ] && find "$d" -maxdepth 1 -type f -perm -u+x -exec cp {} "$out/tests/" \;
done
for f in "$out"/bin/* "$out"/tests/*; do
	[ -f "$f" ] && strip --strip-debug "$f"
done
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libresolv\.|libnss_|libanl\.|libcrypt\.|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcurand|libnccl|libmpi|libopen-|libhwloc|libevent|libpmix|libucp|libucs|libuct|libfabric|libpsm|libibverbs|librdmacm|libnl-|libz\.|libutil\.)'
for f in "$out"/bin/* "$out"/tests/*; do
	[ -f "$f" ] || continue
	ldd "$f" 2>/dev/null | awk '/=> \// {print $1, $3}'
done | sort -u | while read -r name path; do
	echo "$name" | grep -Eq "$skip" && continue
	cp -L "$path" "$out/lib/$name"
done
# the mask benchmark's constraints (docs/benchmarks.md, "grammar masks")
mkdir -p "$out/bench"
cp -r tests/data/schemas "$out/bench/schemas"
cp -r bench/data/grammars "$out/bench/grammars"
cp bench/grammar_summary.py "$out/bench/"
# the GPU test suite, runnable where nothing can be built (run it from the
# repository root so tests/golden is found): sh bundle/test-gpu.sh
cp tests/run.sh tests/gpu_golden.sh tests/gpu_allreduce.sh tests/gpu_sampling_api.sh "$out/"
cat > "$out/test-gpu.sh" <<'RUN'
#!/bin/sh
# make test-gpu from a bundle: kernel tests, attention tests, backend tests,
# quantized-weight tests, fused-epilogue tests, the custom all-reduce under mpirun (MAX_NP=2
# limits it to 2 ranks), golden models on the GPU (tensor parallel on one
# shared GPU, or NCCL tensor/pipeline parallel when the host has 2+ GPUs).
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
set --
for t in @GPU_TESTS@; do [ -x "$here/tests/$t" ] && set -- "$@" "$here/tests/$t"; done
GOLDEN_BIN="$here/tests/test_parallel" ALLREDUCE_BIN="$here/tests/test_allreduce" \
	PPL_BIN="$here/bin/shardline-ppl" BIN="$here/bin" exec sh "$here/run.sh" gpu "$@" "$here/gpu_allreduce.sh" \
	"$here/gpu_golden.sh" "$here/gpu_sampling_api.sh"
RUN
# every single-process GPU test make test-gpu runs (test_allreduce runs
# under mpirun from gpu_allreduce.sh)
gpu_tests=$(cd "$build/tests/gpu" && ls test_* | grep -v '^test_allreduce$' | tr '\n' ' ')
sed -i "s/@GPU_TESTS@/$gpu_tests/" "$out/test-gpu.sh"
chmod +x "$out/test-gpu.sh"
cat > "$out/env.sh" <<'ENV'
# Source this file (. bundle/env.sh): puts the bundled libraries on the
# loader path and the programs on PATH. bash knows where a sourced file
# is; a POSIX sh does not, so the bundle is the first of: $SL_BUNDLE, this
# file's folder (bash) or the sourcing script's, ./bundle, . -- the first
# that holds env.sh, lib/ and bin/. Sets nothing and says so otherwise.
# Leaves no variable of its own behind.
sl_env_dir=""
for sl_env_try in "${SL_BUNDLE:-}" "$(dirname "${BASH_SOURCE:-$0}")" bundle .; do
	if [ -n "$sl_env_try" ] && [ -f "$sl_env_try/env.sh" ] && [ -d "$sl_env_try/lib" ] &&
		[ -d "$sl_env_try/bin" ]; then
		sl_env_dir=$(cd "$sl_env_try" && pwd)
		break
	fi
done
if [ -n "$sl_env_dir" ]; then
	export LD_LIBRARY_PATH="$sl_env_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	export PATH="$sl_env_dir/bin:$PATH"
else
	echo "env.sh: cannot tell where the bundle is (a POSIX sh does not say where a sourced file lies): source it from the folder that holds bundle/, from bash, or with SL_BUNDLE=DIR" >&2
fi
unset sl_env_dir sl_env_try
ENV
echo "bundle: $out ($(ls "$out/lib" | wc -l) libraries, $(du -sh "$out" | cut -f1))"
