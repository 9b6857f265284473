# shardline — one Makefile.
#
#   make            build the CPU backend, plus CUDA kernels when nvcc is found
#   make deps       install the Debian/Ubuntu packages the build needs, and
#                   fetch the real model the tests run (SmolLM2, into build/models)
#   make test       every CPU test; ends with "N passed, N failed"
#   make test-gpu   CUDA kernels against the CPU reference, the custom all-reduce,
#                   golden models on the GPU (GPU host only)
#   make demo       the main job: coordinator + `mpirun -np 2` node group serving
#                   SmolLM2 (from `make deps`) + one streamed chat answer;
#                   DEMO=tiny: a small random model instead, no download
#   make bench      decode benchmark (GPU host)
#   make bundle     relocatable tree (binaries + non-system libs) for GPU nodes
#   make fuzz       libFuzzer targets (clang, ASan+UBSan), FUZZ_SECONDS each (CI: 60)
#
# Variables: CUDA=0|1 (default: 1 when nvcc is on PATH), CUDA_ARCHS="90 80",
#            DEBUG=1 (-O0), SANITIZE=address,undefined.

BUILD      ?= build
GEN        := $(BUILD)/gen
CUDA_HOME  ?= $(or $(patsubst %/bin/nvcc,%,$(shell command -v nvcc 2>/dev/null)),/usr/local/cuda)
CUDA       ?= $(if $(shell command -v nvcc 2>/dev/null),1,0)
CUDA_ARCHS ?= 90
DEBUG      ?= 0
SANITIZE   ?=

CC      ?= cc
NVCC    ?= $(CUDA_HOME)/bin/nvcc
OPT     := $(if $(filter 1,$(DEBUG)),-O0,-O2)
SANFL   := $(if $(SANITIZE),-fsanitize=$(SANITIZE) -fno-omit-frame-pointer,)

MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null)
PKGS       := libcjson libzmq libprotobuf-c oniguruma libutf8proc libmicrohttpd
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CHECK_CFLAGS := $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS   := $(shell pkg-config --libs check 2>/dev/null)

CFLAGS  += -std=c11 -D_GNU_SOURCE $(OPT) -g -Wall -Wextra -Wno-unused-parameter \
           -fopenmp -I. -Icommon -Iproto -Ikernels -Inode -Iparallel -I$(GEN) $(PKG_CFLAGS) $(MPI_CFLAGS) $(SANFL)
LDLIBS  += $(PKG_LIBS) $(MPI_LIBS) -fopenmp -lm -lpthread $(SANFL)

# Binaries: each main source and the name it is installed under.
MAIN_node  := node/main.c
MAIN_mkckpt := tools/mkckpt.c
MAIN_tok   := tools/tok_cli.c
MAIN_coord := coordinator/main.c
MAIN_cli   := tools/cli.c
MAIN_ppl   := tools/perplexity.c
MAINS      := $(MAIN_node) $(MAIN_mkckpt) $(MAIN_tok) $(MAIN_coord) $(MAIN_cli) $(MAIN_ppl)
BINS       := $(BUILD)/bin/shardline-node $(BUILD)/bin/shardline-mkckpt $(BUILD)/bin/shardline-tok \
              $(BUILD)/bin/shardline-coordinator $(BUILD)/bin/shardline $(BUILD)/bin/shardline-loadgen \
              $(BUILD)/bin/shardline-ppl

# Protocol: C generated from proto/*.proto by protoc-c into $(GEN) (never committed).
PROTOS   := $(wildcard proto/*.proto)
GEN_SRCS := $(PROTOS:%.proto=$(GEN)/%.pb-c.c)
GEN_HDRS := $(GEN_SRCS:.c=.h)
GEN_OBJS := $(GEN_SRCS:$(GEN)/%.c=$(BUILD)/obj/gen/%.o)

LIB_SRCS := $(filter-out $(MAINS),$(wildcard common/*.c proto/*.c client/*.c kernels/*.c \
              parallel/*.c node/*.c coordinator/*.c))
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o) $(GEN_OBJS)

ifeq ($(CUDA),1)
CU_SRCS   := $(wildcard kernels/*.cu node/*.cu parallel/*.cu)
CU_OBJS   := $(CU_SRCS:%.cu=$(BUILD)/obj/%.cu.o)
GENCODE   := $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a))
NVCCFLAGS := -std=c++17 -O3 -lineinfo $(GENCODE) -I. -Icommon -Ikernels -Inode -Iparallel \
             -Xcompiler -fPIC --expt-relaxed-constexpr -DSL_HAVE_CUDA
CFLAGS    += -DSL_HAVE_CUDA -I$(CUDA_HOME)/include
LDLIBS    += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
             -lcublasLt -lcublas -lcurand -lnccl -lcudart -lstdc++ -ldl -lrt
endif

LIB := $(BUILD)/libshardline.a
# What only tools and tests use (writing checkpoints), kept out of LIB.
TOOLS_LIB_SRCS := tools/st_writer.c
TOOLS_LIB := $(BUILD)/libshardline-tools.a

# Objects depend on the build configuration: changing CUDA, CUDA_ARCHS,
# DEBUG or SANITIZE rebuilds everything instead of mixing old objects in.
STAMP := $(BUILD)/.config
CONFIG := $(CUDA) $(CUDA_ARCHS) $(DEBUG) $(SANITIZE)
$(shell mkdir -p $(BUILD); echo '$(CONFIG)' | cmp -s - $(STAMP) || echo '$(CONFIG)' > $(STAMP))

ifeq ($(CUDA),1)
BINS += $(BUILD)/bin/shardline-bench $(BUILD)/bin/shardline-bench-allreduce
endif

UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
MPI_BINS  := $(patsubst tests/mpi/%.c,$(BUILD)/tests/mpi/%,$(wildcard tests/mpi/test_*.c))
GPU_SRCS  := $(wildcard tests/gpu/test_*.c)
GPU_BINS  := $(GPU_SRCS:tests/gpu/%.c=$(BUILD)/tests/gpu/%)
# an MPI program: tests/gpu_allreduce.sh runs it under mpirun
GPU_MPI_BIN := $(BUILD)/tests/gpu/test_allreduce
ITEST_BIN := $(BUILD)/tests/integration/itest

.PHONY: all deps test test-gpu demo bench bundle clean
all: $(BINS)

$(GEN)/%.pb-c.c $(GEN)/%.pb-c.h: %.proto
	@mkdir -p $(GEN)
	protoc-c --c_out=$(GEN) $<

# Every C object may include a generated header: generate them first.
$(BUILD)/obj/%.o: %.c $(STAMP) | $(GEN_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/gen/%.o: $(GEN)/%.c $(GEN_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu $(STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJS) $(CU_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(TOOLS_LIB): $(TOOLS_LIB_SRCS:%.c=$(BUILD)/obj/%.o)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/bin/shardline-node: $(BUILD)/obj/node/main.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/bin/shardline-mkckpt: $(BUILD)/obj/tools/mkckpt.o $(TOOLS_LIB) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/bin/shardline-tok: $(BUILD)/obj/tools/tok_cli.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/bin/shardline-coordinator: $(BUILD)/obj/coordinator/main.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/bin/shardline: $(BUILD)/obj/tools/cli.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/bin/shardline-ppl: $(BUILD)/obj/tools/perplexity.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/bin/shardline-bench: $(BUILD)/obj/bench/decode.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/bin/shardline-bench-allreduce: $(BUILD)/obj/bench/allreduce.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/bin/shardline-loadgen: $(BUILD)/obj/bench/serve.o $(BUILD)/obj/bench/serve_http.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c $(TOOLS_LIB) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(CHECK_CFLAGS) -Itests $< $(TOOLS_LIB) $(LIB) -o $@ $(LDLIBS) $(CHECK_LIBS)

$(BUILD)/tests/mpi/%: tests/mpi/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests $< $(LIB) -o $@ $(LDLIBS)

$(ITEST_BIN): tests/integration/itest.c $(LIB) | $(GEN_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests $< $(LIB) -o $@ $(LDLIBS)

$(BUILD)/tests/gpu/%: tests/gpu/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(CHECK_CFLAGS) -Itests $< $(LIB) -o $@ $(LDLIBS) $(CHECK_LIBS)

# The real model `make test` checks (tools/fetch-model.sh: pinned, sha256 checked).
SMOLLM2 := $(BUILD)/models/SmolLM2-135M-Instruct.Q4_1.gguf

deps:
	@sh tools/install-deps.sh && sh tools/fetch-model.sh $(dir $(SMOLLM2))

test: $(BINS) $(UNIT_BINS) $(MPI_BINS) $(ITEST_BIN)
	@BIN=$(BUILD)/bin ITEST=$(ITEST_BIN) SL_SMOLLM2_GGUF=$${SL_SMOLLM2_GGUF:-$(SMOLLM2)} sh tests/run.sh unit \
		$(UNIT_BINS) tests/cli.sh tests/mpi.sh tests/quant_ppl.sh tests/tokenizer_conformance.py \
		tests/integration/serve.sh tests/integration/deadlines.sh tests/soak.sh \
		tests/integration/failover.sh tests/integration/curve.sh tests/integration/standby.sh \
		tests/http/serve.sh tests/http/valgrind.sh

# GPU host only. Where the build's libraries are missing, `make bundle`
# elsewhere and run `sh bundle/test-gpu.sh` from the repository root.
test-gpu: $(BINS) $(GPU_BINS) $(MPI_BINS)
	@GOLDEN_BIN=$(BUILD)/tests/mpi/test_parallel ALLREDUCE_BIN=$(GPU_MPI_BIN) PPL_BIN=$(BUILD)/bin/shardline-ppl \
		SL_SMOLLM2_GGUF=$${SL_SMOLLM2_GGUF:-$(SMOLLM2)} sh tests/run.sh gpu \
		$(filter-out $(GPU_MPI_BIN),$(GPU_BINS)) tests/gpu_allreduce.sh tests/gpu_golden.sh

# DEMO=smollm2 (default): SmolLM2 from `make deps` answers a chat question;
# DEMO=tiny: a small random model made here, for machines without the download.
DEMO ?= smollm2
demo: $(BINS)
	@BIN=$(BUILD)/bin DEMO=$(DEMO) SMOLLM2=$(SMOLLM2) TINY_MODEL=$(BUILD)/demo-model sh tools/demo.sh

# Decode benchmark on the local GPU; result under bench/results/.
bench: $(BINS)
	@mkdir -p bench/results
	$(BUILD)/bin/shardline-bench --shape 7b --out bench/results/decode-7b-$$(date +%Y-%m-%d).json

# The test binaries too: the bundle must not carry stale ones (make test-gpu
# from a bundle runs them).
ifeq ($(CUDA),1)
bundle: $(BINS) $(GPU_BINS) $(MPI_BINS)
else
bundle: $(BINS) $(MPI_BINS)
endif
	@sh tools/bundle.sh $(BUILD) bundle

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD) bundle

# ---- fuzzing (docs/fuzzing.md) ----
# libFuzzer harnesses tests/fuzz/fuzz_*.c, built by clang with ASan and UBSan
# in their own tree, over the library sources compiled again there with the
# same flags: the normal build is untouched.
#   make fuzz          build, run every target FUZZ_SECONDS, FUZZ_JOBS at once;
#                      fails on any crash, leak, UB or hang and names the reproducer
#   make fuzz FUZZ_TARGETS="config gguf" FUZZ_SECONDS=600
#   make fuzz-build    the binaries only ($(FUZZ_BUILD)/fuzz_TARGET)
#   make fuzz-seeds    regenerate the packed seeds (tests/fuzz/make_seeds.c)
FUZZ_BUILD   ?= build-fuzz
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_JOBS    ?= $(shell nproc 2>/dev/null || echo 2)
FUZZ_ALL     := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_TARGETS ?= $(FUZZ_ALL)
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS  := -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Wno-unused-parameter -fopenmp \
                -I. -Icommon -Iproto -Ikernels -Inode -Iparallel -Itests -I$(FUZZ_BUILD)/gen \
                $(PKG_CFLAGS) $(MPI_CFLAGS) $(FUZZ_SAN)
FUZZ_GEN_SRCS := $(PROTOS:%.proto=$(FUZZ_BUILD)/gen/%.pb-c.c)
FUZZ_OBJS    := $(LIB_SRCS:%.c=$(FUZZ_BUILD)/obj/%.o) $(FUZZ_GEN_SRCS:%.c=%.o)
FUZZ_LIB     := $(FUZZ_BUILD)/libshardline.a

.PHONY: fuzz fuzz-build fuzz-seeds
# First the regression tests of what fuzzing found, under the same sanitizers
# (some defects were undefined behaviour that only UBSan makes visible).
fuzz: $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%) $(FUZZ_BUILD)/test_fuzz_regress
	@out=$$($(FUZZ_BUILD)/test_fuzz_regress 2>&1); rc=$$?; \
		printf '%s\n' "$$out" | grep -E '^[0-9]+%|:[EF]:|runtime error|ERROR|^  ' | sed 's/^/fuzz: regress: /'; \
		[ $$rc -eq 0 ] && FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) \
		FUZZ_JOBS=$(FUZZ_JOBS) sh tests/fuzz/run.sh $(FUZZ_TARGETS)

fuzz-build: $(FUZZ_ALL:%=$(FUZZ_BUILD)/fuzz_%)

$(FUZZ_BUILD)/gen/%.pb-c.c $(FUZZ_BUILD)/gen/%.pb-c.h: %.proto
	@mkdir -p $(FUZZ_BUILD)/gen
	protoc-c --c_out=$(FUZZ_BUILD)/gen $<

# Library objects carry coverage (fuzzer-no-link); only harnesses link libFuzzer.
$(FUZZ_BUILD)/obj/%.o: %.c | $(FUZZ_GEN_SRCS:.c=.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/gen/%.pb-c.o: $(FUZZ_BUILD)/gen/%.pb-c.c
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_LIB): $(FUZZ_OBJS)
	rm -f $@ && ar rcs $@ $^

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $(wildcard tests/fuzz/*.h tests/unit/*.h) $(FUZZ_LIB)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -DFUZZ_REPO_DIR='"$(CURDIR)"' \
		$< $(FUZZ_LIB) -o $@ $(PKG_LIBS) $(MPI_LIBS) -lm -lpthread

$(FUZZ_BUILD)/test_fuzz_regress: tests/unit/test_fuzz_regress.c $(wildcard tests/unit/*.h) $(FUZZ_LIB)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(CHECK_CFLAGS) $< $(FUZZ_LIB) -o $@ $(PKG_LIBS) $(MPI_LIBS) \
		$(CHECK_LIBS) -lm -lpthread

fuzz-seeds: $(LIB)
	$(CC) $(CFLAGS) tests/fuzz/make_seeds.c $(LIB) -o $(BUILD)/fuzz-make-seeds $(LDLIBS)
	$(BUILD)/fuzz-make-seeds && python3 tests/fuzz/make_seeds.py

# ---- lab ----
# Kernel experiments in the llm.c dev/cuda style (lab/README.md): lab/OP.cu
# checks each numbered variant against the CPU reference in kernels/OP.c,
# then times it on the local GPU. Each builds to $(BUILD)/bin/lab-OP over the
# library (CUDA=1 only); `make all` builds them and `make bundle` carries them.
#  make lab         every lab binary
#  make lab-gemv    build/bin/lab-gemv [VARIANT] [--check]: fp16 decode GEMV block shapes and cuBLAS vs kernels/matmul.c
#  make lab-qgemv   build/bin/lab-qgemv [--out F.json] [--only N]: quantized layer per format and path, GEMV shapes vs kernels/quant.c
LAB_SRCS  := $(wildcard lab/*.cu)
LAB_NAMES := $(LAB_SRCS:lab/%.cu=lab-%)
LAB_BINS  := $(LAB_NAMES:%=$(BUILD)/bin/%)
.PHONY: lab $(LAB_NAMES)
ifeq ($(CUDA),1)
lab: $(LAB_BINS)
$(LAB_NAMES): lab-%: $(BUILD)/bin/lab-%
all bundle: $(LAB_BINS)
# lab/OP.cu includes kernels/OP.cu (its templates): the archive's copy of
# those objects is then not pulled into the link.
$(BUILD)/bin/lab-%: $(BUILD)/obj/lab/%.cu.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)
# kept (not deleted as intermediates): their .d files name them
.SECONDARY: $(LAB_SRCS:%.cu=$(BUILD)/obj/%.cu.o)
else
lab $(LAB_NAMES):
	@echo "make $@: the lab needs CUDA (nvcc on PATH, or CUDA=1)" >&2; exit 1
endif
# ---- end of lab ----

-include $(shell find $(BUILD)/obj $(FUZZ_BUILD)/obj -name '*.d' 2>/dev/null)
