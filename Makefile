# shardline — one Makefile.
#
#   make            build the CPU backend, plus CUDA kernels when nvcc is found
#   make help       the targets, the folders and how they may use each other
#   make deps       install the Debian/Ubuntu packages the build needs, and
#                   fetch the real model the tests run (SmolLM2, into build/models),
#                   build third-party code (xgrammar: tools/third_party.sh)
#   make test       every CPU test; ends with "N passed, N failed"
#   make test T=test_tokenizer   one test (a unit test or a script's name)
#   make test-text  one folder's unit tests (test-formats, test-kernels,
#                   test-parallel, test-node, test-coordinator), or
#                   test-scripts: the CLI, MPI, integration and HTTP scripts
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
#            DEBUG=1 (-O0), SANITIZE=address,undefined,
#            TIMELINE=1 (kernels record a per-block timeline, kernels/timeline.h;
#            objects in build-timeline/: e.g. make TIMELINE=1
#            build-timeline/bin/shardline-bench-decode).

# plain `make` is `make all` (a rule below, common/version.o's, came first)
.DEFAULT_GOAL := all

TIMELINE   ?= 0
BUILD      ?= $(if $(filter 1,$(TIMELINE)),build-timeline,build)
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

# ---- the folders (docs/architecture.md) ----
# Each folder is one archive, compiled seeing only itself and the folders
# it uses, all below it: its include root $(BUILD)/inc/FOLDER holds links to
# exactly those, so `#include "coordinator/x.h"` in node/ does not compile.
# The archives are linked top floor first, so a call that runs back up
# (a lower folder using a name only a higher one defines) does not link.
USES_common      :=
USES_formats     := common
USES_proto       := common
USES_kernels     := common
USES_text        := formats common
USES_parallel    := kernels common
USES_client      := proto common
USES_grammar     := text formats common
USES_node        := grammar parallel kernels formats proto common
USES_coordinator := grammar text formats proto common
FOLDERS := coordinator node client grammar parallel text kernels proto formats common

# Programs, tools, benchmarks, the lab and tests stand on top: they see
# every folder and link every archive.
TOP_INC  := -I. -I$(GEN)
ARCHIVES := $(FOLDERS:%=$(BUILD)/lib/lib%.a)

CFLAGS  += -std=c11 -D_GNU_SOURCE $(OPT) -g -Wall -Wextra -Wno-unused-parameter \
           -fopenmp $(PKG_CFLAGS) $(MPI_CFLAGS) $(SANFL)
LDLIBS  += $(PKG_LIBS) $(MPI_LIBS) -fopenmp -lm -lpthread $(SANFL)

# Where a source is compiled from: a folder's include root, or the top.
folder_of = $(firstword $(subst /, ,$(1)))
inc_of    = $(if $(filter $(FOLDERS),$(call folder_of,$(1))),-I$(BUILD)/inc/$(call folder_of,$(1)) \
              $(if $(filter proto,$(call folder_of,$(1)) $(USES_$(call folder_of,$(1)))),-I$(GEN)),$(TOP_INC))

# Protocol: C generated from proto/*.proto by protoc-c into $(GEN) (never committed).
PROTOS   := $(wildcard proto/*.proto)
GEN_SRCS := $(PROTOS:%.proto=$(GEN)/%.pb-c.c)
GEN_HDRS := $(GEN_SRCS:.c=.h)
GEN_OBJS := $(GEN_SRCS:$(GEN)/%.c=$(BUILD)/obj/gen/%.o)

# A folder's sources: its .c files (text/ has sub-folders), less the mains.
MAINS    := node/main.c coordinator/main.c
srcs_of   = $(filter-out $(MAINS),$(wildcard $(1)/*.c $(1)/*/*.c))
LIB_SRCS := $(foreach f,$(FOLDERS),$(call srcs_of,$(f)))

ifeq ($(CUDA),1)
CU_SRCS   := $(wildcard kernels/*.cu parallel/*.cu)
GENCODE   := $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a))
NVCCFLAGS := -std=c++17 -O3 -lineinfo $(GENCODE) -Xcompiler -fPIC --expt-relaxed-constexpr -DSL_HAVE_CUDA \
             $(if $(filter 1,$(TIMELINE)),-DSL_TIMELINE)
CFLAGS    += -DSL_HAVE_CUDA -I$(CUDA_HOME)/include
# Files on Hopper-only instructions (wgmma) build for sm_90a where
# CUDA_ARCHS lists 90; their host side checks the image before using it.
comma     := ,
SM90A_OBJS := $(BUILD)/obj/kernels/attention_wgmma.cu.o $(BUILD)/obj/kernels/quant_gemm_wgmma.cu.o
$(SM90A_OBJS): NVCCFLAGS := $(subst arch=compute_90$(comma)code=sm_90,arch=compute_90a$(comma)code=sm_90a,$(NVCCFLAGS))
LDLIBS    += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
             -lcublasLt -lcublas -lcurand -lnccl -lcudart -lstdc++ -ldl -lrt
endif
objs_of = $(patsubst %.c,$(BUILD)/obj/%.o,$(call srcs_of,$(1))) \
          $(patsubst %.cc,$(BUILD)/obj/%.cc.o,$(wildcard $(1)/*.cc)) \
          $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(filter $(1)/%,$(CU_SRCS))) \
          $(if $(filter proto,$(1)),$(GEN_OBJS))

# Third-party code, built from pinned downloads, never committed
# (tools/third_party.sh): xgrammar's C++ core, the grammar engine behind
# grammar/ (its only C++ user: grammar/*.cc see its headers).
THIRD_PARTY ?= build/third_party
XG_SRC  := $(THIRD_PARTY)/xgrammar-0.2.9
XG_LIB  := $(THIRD_PARTY)/lib/libxgrammar.a
XG_INC  := -I$(XG_SRC)/include -I$(XG_SRC)/cpp -I$(XG_SRC)/3rdparty/picojson -I$(XG_SRC)/3rdparty/dlpack/include \
           -DXGRAMMAR_ENABLE_CPPTRACE=0
CXX     ?= g++
CXXFLAGS := -std=c++17 -D_GNU_SOURCE $(OPT) -g -Wall -Wextra -Wno-unused-parameter -fPIC $(SANFL)
LDLIBS  += $(XG_LIB) -lstdc++

# Objects depend on the build configuration: changing CUDA, CUDA_ARCHS,
# DEBUG, SANITIZE or TIMELINE rebuilds everything instead of mixing old objects in.
STAMP := $(BUILD)/.config
CONFIG := $(CUDA) $(CUDA_ARCHS) $(DEBUG) $(SANITIZE)$(if $(filter 1,$(TIMELINE)), timeline)
$(shell mkdir -p $(BUILD); echo '$(CONFIG)' | cmp -s - $(STAMP) || echo '$(CONFIG)' > $(STAMP))

# --version (common/version.c): `git describe` of this tree, rebuilt when it changes.
GIT_DESCRIBE := $(shell git describe --always --dirty --tags 2>/dev/null)
$(shell echo '$(GIT_DESCRIBE)' | cmp -s - $(BUILD)/.version || echo '$(GIT_DESCRIBE)' > $(BUILD)/.version)
$(BUILD)/obj/common/version.o: CFLAGS += -DSL_GIT_DESCRIBE='"$(GIT_DESCRIBE)"'
$(BUILD)/obj/common/version.o: $(BUILD)/.version

# ---- programs: each named after its source ----
#   node/main.c, coordinator/main.c  -> shardline-node, shardline-coordinator
#   tools/shardline.c                -> shardline (the CLI)
#   tools/NAME.c                     -> shardline-NAME (mkckpt, tok, ppl)
#   bench/NAME.c                     -> shardline-bench-NAME (serve; on CUDA: decode, allreduce)
BINS := $(BUILD)/bin/shardline-node $(BUILD)/bin/shardline-coordinator $(BUILD)/bin/shardline \
        $(BUILD)/bin/shardline-mkckpt $(BUILD)/bin/shardline-tok $(BUILD)/bin/shardline-ppl \
        $(BUILD)/bin/shardline-bench-serve $(BUILD)/bin/shardline-bench-grammar
ifeq ($(CUDA),1)
BINS += $(BUILD)/bin/shardline-bench-decode $(BUILD)/bin/shardline-bench-allreduce
endif
# A program's own extra objects: the serving benchmark's HTTP client.
EXTRA_shardline-bench-serve := $(BUILD)/obj/bench/serve_http.o

# ---- tests ----
# tests/unit/FOLDER/test_*.c: Check suites, one folder's per `make test-FOLDER`;
# tests/fuzz/test_fuzz_regress.c: what fuzzing found, in make test and make fuzz.
UNIT_SRCS := $(wildcard tests/unit/*/test_*.c) tests/fuzz/test_fuzz_regress.c
UNIT_BINS := $(foreach s,$(UNIT_SRCS),$(BUILD)/tests/$(basename $(notdir $(s))))
MPI_BINS  := $(patsubst tests/mpi/%.c,$(BUILD)/tests/mpi/%,$(wildcard tests/mpi/test_*.c))
GPU_SRCS  := $(wildcard tests/gpu/test_*.c)
GPU_BINS  := $(GPU_SRCS:tests/gpu/%.c=$(BUILD)/tests/gpu/%)
# an MPI program: tests/gpu_allreduce.sh runs it under mpirun
GPU_MPI_BIN := $(BUILD)/tests/gpu/test_allreduce
ITEST_BIN := $(BUILD)/tests/integration/itest
# The scripts make test runs after the unit tests, in this order.
TEST_SCRIPTS := tests/cli.sh tests/mpi.sh tests/quant_ppl.sh tests/tokenizer_conformance.py tests/chat_tools_conformance.py \
	tests/integration/serve.sh tests/integration/deadlines.sh tests/soak.sh \
	tests/integration/failover.sh tests/integration/curve.sh tests/integration/standby.sh \
	tests/integration/liveness.sh \
	tests/http/serve.sh tests/http/structured.sh tests/http/security.sh tests/http/valgrind.sh tests/deploy.sh tests/deps.sh tests/cli_serve.sh tests/bench_serve.sh tests/bench_ab.sh tests/ncu_kernel.sh tests/timeline.sh tests/bundle_env.sh \
	tests/multihost.sh

.PHONY: all help deps test test-scripts test-gpu demo bench bundle clean $(FOLDERS:%=test-%)
all: $(BINS)

$(GEN)/%.pb-c.c $(GEN)/%.pb-c.h: %.proto
	@mkdir -p $(GEN)
	protoc-c --c_out=$(GEN) $<

# A folder's include root: links to itself and the folders it uses.
$(BUILD)/inc/%/.made: Makefile
	@rm -rf $(dir $@) && mkdir -p $(dir $@)
	@for d in $* $(USES_$*); do ln -s $(CURDIR)/$$d $(dir $@)$$d; done
	@touch $@
INC_STAMPS := $(FOLDERS:%=$(BUILD)/inc/%/.made)
.PRECIOUS: $(BUILD)/inc/%/.made

# Every C object may include a generated header: generate them first.
$(BUILD)/obj/%.o: %.c $(STAMP) | $(GEN_HDRS) $(INC_STAMPS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(call inc_of,$<) -MMD -MP -c $< -o $@

$(XG_LIB):
	sh tools/third_party.sh $(THIRD_PARTY)

$(BUILD)/obj/%.cc.o: %.cc $(STAMP) $(XG_LIB) | $(INC_STAMPS)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(call inc_of,$<) $(XG_INC) -MMD -MP -c $< -o $@

$(BUILD)/obj/gen/%.o: $(GEN)/%.c $(GEN_HDRS) | $(INC_STAMPS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(BUILD)/inc/proto -I$(GEN) -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu $(STAMP) | $(INC_STAMPS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(call inc_of,$<) -MMD -MP -c $< -o $@

# One archive per folder.
define folder_archive
$(BUILD)/lib/lib$(1).a: $(call objs_of,$(1))
	@mkdir -p $$(dir $$@)
	rm -f $$@ && ar rcs $$@ $$^
endef
$(foreach f,$(FOLDERS),$(eval $(call folder_archive,$(f))))

# Every program and test links the archives top floor first.
LINK = $(CC) $(CFLAGS) $(TOP_INC) $(1) $(ARCHIVES) -o $@ $(LDLIBS) $(2)

$(BUILD)/bin/shardline-%: %/main.c $(ARCHIVES)
	@mkdir -p $(dir $@)
	$(call LINK,$<)

$(BUILD)/bin/shardline: tools/shardline.c tools/serve.c $(ARCHIVES)
	@mkdir -p $(dir $@)
	$(call LINK,$< tools/serve.c)

$(BUILD)/bin/shardline-%: tools/%.c $(ARCHIVES)
	@mkdir -p $(dir $@)
	$(call LINK,$<)

.SECONDEXPANSION:
$(BUILD)/bin/shardline-bench-%: bench/%.c $$(EXTRA_shardline-bench-%) $(ARCHIVES)
	@mkdir -p $(dir $@)
	$(call LINK,$< $(EXTRA_shardline-bench-$*))

define unit_test
$(BUILD)/tests/$(basename $(notdir $(1))): $(1) $$(wildcard tests/unit/*.h) $(ARCHIVES)
	@mkdir -p $$(dir $$@)
	$$(call LINK,$(CHECK_CFLAGS) -Itests $$<,$(CHECK_LIBS))
endef
$(foreach s,$(UNIT_SRCS),$(eval $(call unit_test,$(s))))

$(BUILD)/tests/mpi/%: tests/mpi/%.c $(ARCHIVES)
	@mkdir -p $(dir $@)
	$(call LINK,-Itests $<)

$(ITEST_BIN): tests/integration/itest.c $(ARCHIVES) | $(GEN_HDRS)
	@mkdir -p $(dir $@)
	$(call LINK,-Itests $<)

$(BUILD)/tests/gpu/%: tests/gpu/%.c $(wildcard tests/gpu/*.h) $(ARCHIVES)
	@mkdir -p $(dir $@)
	$(call LINK,$(CHECK_CFLAGS) -Itests $<,$(CHECK_LIBS))

help:
	@sed -n '/^# shardline/,/^$$/p' Makefile | sed 's/^# \{0,1\}//'
	@echo "Folders, each an archive, and the folders each may use:"
	@$(foreach f,$(FOLDERS),printf '  %-12s %s\n' '$(f)' '$(or $(USES_$(f)),-)';)
	@echo "Programs (build/bin):"
	@$(foreach b,$(BINS),echo '  $(notdir $(b))';)
	@echo "Unit tests (make test T=NAME):"
	@$(foreach f,$(FOLDERS),$(if $(wildcard tests/unit/$(f)/test_*.c),echo '  $(f): $(notdir $(basename $(wildcard tests/unit/$(f)/test_*.c)))';))
	@sed -n 's/^#  \(make lab-.*\)/\1/p' Makefile | sed 's/^/  /'

# The real model `make test` checks (tools/fetch-model.sh: pinned, sha256 checked).
SMOLLM2 := $(BUILD)/models/SmolLM2-135M-Instruct.Q4_1.gguf

deps:
	@sh tools/install-deps.sh && sh tools/fetch-model.sh $(dir $(SMOLLM2)) && \
		sh tools/third_party.sh $(THIRD_PARTY)

# T=NAME runs one unit test or script (its file name without .c/.sh/.py).
TEST_RUN = BIN=$(BUILD)/bin ITEST=$(ITEST_BIN) SL_SMOLLM2_GGUF=$${SL_SMOLLM2_GGUF:-$(SMOLLM2)} sh tests/run.sh
ONE_TEST = $(filter $(BUILD)/tests/$(T),$(UNIT_BINS)) $(filter %/$(T).sh %/$(T).py,$(TEST_SCRIPTS))
test: $(BINS) $(if $(T),$(filter $(BUILD)/tests/$(T),$(UNIT_BINS)),$(UNIT_BINS)) $(MPI_BINS) $(ITEST_BIN)
ifeq ($(T),)
	@$(TEST_RUN) unit $(UNIT_BINS) $(TEST_SCRIPTS)
else
	@[ -n "$(strip $(ONE_TEST))" ] || { echo "make test: no test named $(T) (make help lists them)"; exit 2; }
	@$(TEST_RUN) unit $(ONE_TEST)
endif

# One folder's unit tests; the scripts (CLI, MPI grids, integration, HTTP).
$(FOLDERS:%=test-%): test-%: $(BINS)
	@t='$(foreach s,$(wildcard tests/unit/$*/test_*.c),$(BUILD)/tests/$(basename $(notdir $(s))))'; \
		[ -n "$$t" ] || { echo "make test-$*: tests/unit/$*/ holds no test"; exit 2; }; \
		$(MAKE) --no-print-directory $$t && $(TEST_RUN) $* $$t
test-scripts: $(BINS) $(MPI_BINS) $(ITEST_BIN)
	@$(TEST_RUN) scripts $(TEST_SCRIPTS)

# GPU host only. Where the build's libraries are missing, `make bundle`
# elsewhere and run `sh bundle/test-gpu.sh` from the repository root.
test-gpu: $(BINS) $(GPU_BINS) $(MPI_BINS)
	@GOLDEN_BIN=$(BUILD)/tests/mpi/test_parallel ALLREDUCE_BIN=$(GPU_MPI_BIN) PPL_BIN=$(BUILD)/bin/shardline-ppl \
		SL_SMOLLM2_GGUF=$${SL_SMOLLM2_GGUF:-$(SMOLLM2)} sh tests/run.sh gpu \
		$(filter-out $(GPU_MPI_BIN),$(GPU_BINS)) tests/gpu_allreduce.sh tests/gpu_golden.sh \
		tests/gpu_sampling_api.sh

# DEMO=smollm2 (default): SmolLM2 from `make deps` answers a chat question;
# DEMO=tiny: a small random model made here, for machines without the download.
DEMO ?= smollm2
demo: $(BINS)
	@BIN=$(BUILD)/bin DEMO=$(DEMO) SMOLLM2=$(SMOLLM2) TINY_MODEL=$(BUILD)/demo-model sh tools/demo.sh

# Decode benchmark on the local GPU; result under bench/results/.
bench: $(BINS)
	@mkdir -p bench/results
	$(BUILD)/bin/shardline-bench-decode --shape 7b --out bench/results/decode-7b-$$(date +%Y-%m-%d).json

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
                -I. -Itests -I$(FUZZ_BUILD)/gen \
                $(PKG_CFLAGS) $(MPI_CFLAGS) $(FUZZ_SAN)
FUZZ_GEN_SRCS := $(PROTOS:%.proto=$(FUZZ_BUILD)/gen/%.pb-c.c)
FUZZ_OBJS    := $(LIB_SRCS:%.c=$(FUZZ_BUILD)/obj/%.o) $(FUZZ_GEN_SRCS:%.c=%.o) \
                $(patsubst %.cc,$(FUZZ_BUILD)/obj/%.cc.o,$(wildcard grammar/*.cc))
# grammar/'s C++ shim under the same sanitizers (but vptr, whose runtime a
# C link lacks); xgrammar itself links as built (uninstrumented).
FUZZ_CXX     ?= clang++
FUZZ_LDLIBS  := $(PKG_LIBS) $(MPI_LIBS) $(XG_LIB) -lstdc++ -lm -lpthread
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

$(FUZZ_BUILD)/obj/%.cc.o: %.cc $(XG_LIB)
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) -std=c++17 -O1 -g -I. $(XG_INC) $(FUZZ_SAN) -fno-sanitize=vptr \
		-fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/gen/%.pb-c.o: $(FUZZ_BUILD)/gen/%.pb-c.c
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_LIB): $(FUZZ_OBJS)
	rm -f $@ && ar rcs $@ $^

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $(wildcard tests/fuzz/*.h tests/unit/*.h) $(FUZZ_LIB)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -DFUZZ_REPO_DIR='"$(CURDIR)"' \
		$< $(FUZZ_LIB) -o $@ $(FUZZ_LDLIBS)

$(FUZZ_BUILD)/test_fuzz_regress: tests/fuzz/test_fuzz_regress.c $(wildcard tests/unit/*.h) $(FUZZ_LIB)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(CHECK_CFLAGS) $< $(FUZZ_LIB) -o $@ $(FUZZ_LDLIBS) $(CHECK_LIBS)

fuzz-seeds: $(ARCHIVES)
	$(CC) $(CFLAGS) $(TOP_INC) tests/fuzz/make_seeds.c $(ARCHIVES) -o $(BUILD)/fuzz-make-seeds $(LDLIBS)
	$(BUILD)/fuzz-make-seeds && python3 tests/fuzz/make_seeds.py

# ---- lab ----
# Kernel experiments in the llm.c dev/cuda style (lab/README.md): lab/OP.cu
# checks each numbered variant against the CPU reference in kernels/OP.c,
# then times it on the local GPU. Each builds to $(BUILD)/bin/lab-OP over the
# library (CUDA=1 only); `make all` builds them and `make bundle` carries them.
#  make lab         every lab binary
#  make lab-gemv    build/bin/lab-gemv [VARIANT] [--check]: fp16 decode GEMV block shapes and cuBLAS vs kernels/matmul.c
#  make lab-qgemv   build/bin/lab-qgemv [--out F.json] [--only N]: quantized layer per format and path, GEMV shapes vs kernels/quant.c
#  make lab-l2      build/bin/lab-l2 [MiB]: L2 bulk prefetch cost, hits and overlap (a hardware probe)
#  make lab-stream  build/bin/lab-stream [ROWS COLS ...]: how fast tiles of a weight matrix stream by ld.global or TMA, no arithmetic (a hardware probe)
#  make lab-xchg    build/bin/lab-xchg [ROUNDS]: how long a tile's words take between two GPUs (or on one), as the GEMVs' exchange sends them (a hardware probe)
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
$(BUILD)/bin/lab-%: $(BUILD)/obj/lab/%.cu.o $(ARCHIVES)
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
