# collage — build: make (library + CLI), make test, make run (the main job), make ci-san / ci-noomp.
# Variants build into their own folder: SAN=1 (ASan+UBSan), OMP=0 (no OpenMP), WERROR=1.
# MPI=auto (default: on when mpicc is found) builds `collage train` data-parallel over MPI; MPI=0 without.
# Never add the fast-math family (O-fast, fast-math, associative-math): it compiles TwoSum's error term to 0.
CC      ?= cc
BUILD   ?= build
OMP     ?= 1
SAN     ?= 0
WERROR  ?= 0

CFLAGS_BASE = -std=c11 -O2 -g -ffp-contract=off -fno-fast-math -fno-math-errno -fPIC \
              -Wall -Wextra -Wshadow -Wdouble-promotion -Wstrict-prototypes -D_GNU_SOURCE -Iinclude
ifeq ($(WERROR),1)
CFLAGS_BASE += -Werror
endif
ifeq ($(OMP),1)
CFLAGS_BASE += -fopenmp
LDOMP = -fopenmp
else
CFLAGS_BASE += -Wno-unknown-pragmas
endif
ifeq ($(SAN),1)
CFLAGS_BASE += -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
LDSAN = -fsanitize=address,undefined
endif
# CCACHE=ccache: each unit compiled through a compiler cache (CI sets it; a unit whose preprocessed text
# and flags were compiled before, in any folder, is not compiled again).
CCACHE ?=
# MPI is the CLI's only (libcollage stays MPI-free): its headers as system headers (no warnings of theirs).
MPI ?= auto
ifeq ($(MPI),auto)
MPI := $(if $(shell command -v mpicc 2>/dev/null),1,0)
endif
ifeq ($(MPI),1)
MPI_CFLAGS := -DCOLLAGE_MPI $(patsubst -I%,-isystem %,$(shell mpicc --showme:compile))
MPI_LIBS := $(shell mpicc --showme:link)
endif
# oneDNN (Debian's libdnnl-dev) gives the bf16 model its bf16 matrix products on CPUs with bf16
# instructions. DNNL=auto: on when its header is found and OpenMP is on (oneDNN's own threads are
# OpenMP's; with OMP=0 the bf16 model takes the widening path). DNNL=0: always the widening path.
DNNL ?= auto
ifeq ($(DNNL),auto)
DNNL := $(if $(and $(filter 1,$(OMP)),$(wildcard /usr/include/oneapi/dnnl/dnnl.h)),1,0)
endif
ifeq ($(DNNL),1)
CFLAGS_BASE += -DCOLLAGE_DNNL
LDDNNL = -ldnnl
endif
CFLAGS_ALL = $(CFLAGS_BASE) $(CFLAGS)
# A unit's flags: CFLAGS_ALL, or for the units built without sanitizer instrumentation (below) the same
# flags less the sanitizers' (so that such a unit is the same object in a SAN=1 build as in the plain one).
UNIT_CFLAGS = $(CFLAGS_ALL)
CFLAGS_NOSAN = $(filter-out -fsanitize=% -fno-sanitize-recover=% -fno-omit-frame-pointer,$(CFLAGS_ALL))
LDLIBS_ALL = $(LDOMP) $(LDSAN) $(LDDNNL) -lopenblas -lm $(LDLIBS)

# CUDA=1: also libcollage_cuda (src/cuda/, include/collage_cuda.h: the AdamW step on NVIDIA GPUs, linked
# against libcollage.so) and the device check's test program (tests/gpu/, run by scripts/gpu_check.sh on a
# machine with a GPU), with nvcc (NVCC, found on PATH or in /usr/local/cuda). Without it nothing of CUDA is
# built. NVCC_NUMERICS keeps every operation rounded once, as the C library's -ffp-contract=off does:
# no contraction into fused multiply-adds, IEEE division and square root, subnormals kept
# (tests/test_adamw_elem.c fails if these flags change).
CUDA ?= 0
NVCC ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc),nvcc)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
NVCC_NUMERICS = --fmad=false -ftz=false -prec-div=true -prec-sqrt=true
# sm_90: H100 and H200; sm_80 (A100) and PTX of compute_90 for newer devices, compiled by the driver.
CUDA_ARCH ?= -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90 \
             -gencode=arch=compute_90,code=compute_90
NVCC_FLAGS = -std=c++17 -O2 -g -lineinfo $(NVCC_NUMERICS) $(CUDA_ARCH) -Iinclude -Isrc/optim \
             -Xcompiler -fPIC,-Wall,-Wextra,-Wshadow,-ffp-contract=off
ifeq ($(WERROR),1)
NVCC_FLAGS += -Werror all-warnings -Xcompiler -Werror
endif

# The library's rooms (docs/architecture.md); each folder's headers are private to the library and
# its tests: cli/ sees include/ only.
SRC_DIRS = src/core src/numerics src/optim src/nn src/models src/train
SRC_INC  = $(addprefix -I,$(SRC_DIRS))
LIB_SRC  = $(wildcard $(addsuffix /*.c,$(SRC_DIRS)))
# The two vector-kernel units of the optimizer take most of a build's time (minutes each, the rest seconds):
# listed first, make -j starts them first, and the others build beside them.
SLOW_OBJ = $(BUILD)/obj/optim/adamw_avx512.o $(BUILD)/obj/optim/adamw_avx2.o
LIB_OBJ  = $(SLOW_OBJ) $(filter-out $(SLOW_OBJ),$(patsubst src/%.c,$(BUILD)/obj/%.o,$(LIB_SRC)))
CLI_SRC  = $(wildcard cli/*.c)
CLI_OBJ  = $(patsubst cli/%.c,$(BUILD)/obj/cli_%.o,$(CLI_SRC))
TEST_SRC = $(wildcard tests/test_*.c)
TEST_BIN = $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC)) $(BUILD)/tests/test_install
# The Python package's suite: in a SAN=1 build it says why it skips (an ASan-instrumented libcollage.so
# loads into the interpreter only with libasan preloaded; docs/testing.md).
TEST_BIN += $(BUILD)/tests/test_python $(BUILD)/tests/test_python_torch2
HDRS     = $(wildcard include/*.h) $(wildcard $(addsuffix /*.h,$(SRC_DIRS))) $(wildcard src/*/*.inc) $(wildcard cli/*.h) \
           tests/harness.h tests/corpus.h

.PHONY: all lib cli tests test run setup clean ci-san ci-noomp fuzz install check-headers python cuda FORCE
all: lib cli $(if $(filter 1,$(CUDA)),cuda)
lib: $(BUILD)/libcollage.a $(BUILD)/libcollage.so
cli: $(BUILD)/collage
tests: $(TEST_BIN)

$(BUILD)/obj/%.o: src/%.c $(HDRS) $(BUILD)/dnnl.flag | $(BUILD)/obj
	@mkdir -p $(dir $@)
	$(CCACHE) $(CC) $(UNIT_CFLAGS) $(SRC_INC) $(ISA_FLAGS) -c $< -o $@
# Vector kernels: one translation unit per instruction set, entered only after a run-time CPU check.
# The fused AdamW loops are long dependency chains of emulated roundings; scheduling before register
# allocation interleaves the vectors of an iteration (10-20% faster, same instructions).
KERNEL_FLAGS = -fschedule-insns -fsched-pressure --param=sched-pressure-algorithm=2
# (GCC's options; clang has no such pass and refuses them: with CC=clang the kernels build without.)
ifneq ($(findstring clang,$(shell $(CC) --version 2>/dev/null | head -n 1)),)
KERNEL_FLAGS =
endif
# Under SAN=1 the two vector-kernel units are built without sanitizer instrumentation, with the plain
# build's flags: instrumented, GCC 12 takes over 6 minutes and 4 GB on adamw_avx512.c at any -O level
# (measured; -O0, -O1, call-threshold instrumentation and no use-after-scope did not help). The kernels
# are still run by the SAN suite (the shipped code, bit for bit against the instrumented _ref) and every
# other unit, their callers and the slabs they work on included, stays instrumented.
$(SLOW_OBJ): UNIT_CFLAGS = $(CFLAGS_NOSAN)
$(BUILD)/obj/optim/adamw_avx512.o: ISA_FLAGS = -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c $(KERNEL_FLAGS)
$(BUILD)/obj/optim/adamw_avx2.o: ISA_FLAGS = -mavx2 -mfma -mf16c $(KERNEL_FLAGS)
# The bf16 model's ops and graph, 16 lanes wide (the same values: -ffp-contract=off, no sums vectorised).
AVX512_FLAGS = -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c
$(BUILD)/obj/nn/ops_bf16_avx512.o $(BUILD)/obj/nn/matmul_bf16_avx512.o $(BUILD)/obj/models/gpt2_bf16_avx512.o \
  $(BUILD)/obj/models/llama_bf16_avx512.o: ISA_FLAGS = $(AVX512_FLAGS)
$(BUILD)/obj/nn/ops_bf16_avx512.o: src/nn/ops_bf16.c
$(BUILD)/obj/nn/gemm_ref_avx512.o: ISA_FLAGS = $(AVX512_FLAGS)
# collage's own bf16 product (an AVX-512 micro-kernel of fp32 FMAs), entered only on AVX-512 CPUs.
$(BUILD)/obj/nn/gemm_fma.o: ISA_FLAGS = $(AVX512_FLAGS)
# The fp8 quantizer's loops, one unit per instruction set (fp8q_kernel.inc).
$(BUILD)/obj/numerics/fp8q_avx512.o: ISA_FLAGS = $(AVX512_FLAGS)
$(BUILD)/obj/numerics/fp8q_avx2.o: ISA_FLAGS = -mavx2 -mfma -mf16c
# The fp4 quantizer's loops, likewise (fp4q_kernel.inc).
$(BUILD)/obj/numerics/fp4q_avx512.o: ISA_FLAGS = $(AVX512_FLAGS)
$(BUILD)/obj/numerics/fp4q_avx2.o: ISA_FLAGS = -mavx2 -mfma -mf16c
$(BUILD)/obj/nn/gemm_ref_avx512.o: src/nn/gemm_ref.c
ifeq ($(SAN),1)
# The reference sgemm runs every product of the golden runs (COLLAGE_GEMM=ref): instrumented, test_golden
# took 244 s instead of 20 (measured). Like the vector kernels it is built without instrumentation under
# SAN=1: it touches only the ranges the door hands it, and its bits are checked by every suite.
$(BUILD)/obj/nn/gemm_ref.o $(BUILD)/obj/nn/gemm_ref_avx512.o: UNIT_CFLAGS = $(CFLAGS_NOSAN)
endif
$(BUILD)/obj/nn/matmul_bf16_avx512.o: src/nn/matmul_bf16.c
$(BUILD)/obj/models/gpt2_bf16_avx512.o: src/models/gpt2_bf16.c
$(BUILD)/obj/nn/matmul_bert_bf16_avx512.o $(BUILD)/obj/models/bert_bf16_avx512.o: ISA_FLAGS = $(AVX512_FLAGS)
$(BUILD)/obj/nn/matmul_bert_bf16_avx512.o: src/nn/matmul_bert_bf16.c
$(BUILD)/obj/models/bert_bf16_avx512.o: src/models/bert_bf16.c
$(BUILD)/obj/models/llama_bf16_avx512.o: src/models/llama_bf16.c
# The CLI sees include/ only (make check-headers).
$(BUILD)/obj/cli_%.o: cli/%.c $(HDRS) $(BUILD)/mpi.flag | $(BUILD)/obj
	$(CCACHE) $(CC) $(CFLAGS_ALL) $(MPI_CFLAGS) -c $< -o $@
# Rebuild the CLI when MPI is switched on or off for this folder.
$(BUILD)/mpi.flag: FORCE | $(BUILD)/obj
	@echo "$(MPI)" | cmp -s - $@ || echo "$(MPI)" > $@
# Rebuild the library when oneDNN is switched on or off for this folder.
$(BUILD)/dnnl.flag: FORCE | $(BUILD)/obj
	@echo "$(DNNL)" | cmp -s - $@ || echo "$(DNNL)" > $@
FORCE:
$(BUILD)/obj $(BUILD)/tests:
	mkdir -p $@
$(BUILD)/libcollage.a: $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^
# The shared library's SONAME is libcollage.so.MAJOR.MINOR while MAJOR is 0 (a 0.x minor version may
# change the ABI; the Python package refuses another major.minor too), as Debian names such libraries.
$(BUILD)/libcollage.so: $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,$(SONAME) -o $@ $^ $(LDLIBS_ALL)
# The CUDA step (CUDA=1): its library, and the device check's program against the CPU library.
cuda: $(BUILD)/libcollage_cuda.so $(BUILD)/gpu/test_cuda
$(BUILD)/obj/cuda/%.o: src/cuda/%.cu include/collage.h include/collage_cuda.h src/optim/adamw_elem.h src/optim/lines.inc Makefile | $(BUILD)/obj
	@mkdir -p $(dir $@)
	@command -v $(NVCC) >/dev/null || { echo "make CUDA=1: nvcc not found (NVCC=$(NVCC)); install the CUDA toolkit or set NVCC=/path/to/nvcc"; exit 1; }
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@
# It finds libcollage by its SONAME beside it ($$ORIGIN): the link is made here.
$(BUILD)/libcollage_cuda.so: $(BUILD)/obj/cuda/adamw.o $(BUILD)/libcollage.so
	ln -sf libcollage.so $(BUILD)/$(SONAME)
	$(NVCC) -shared -o $@ $< -L$(BUILD) -l:libcollage.so -Xlinker -rpath,'$$ORIGIN' -lcudart
$(BUILD)/obj/gpu/exhaustive.o: tests/gpu/exhaustive.cu include/collage.h src/optim/adamw_elem.h Makefile | $(BUILD)/obj
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@
$(BUILD)/gpu/test_cuda: tests/gpu/test_cuda.c $(BUILD)/obj/gpu/exhaustive.o tests/harness.h include/collage_cuda.h $(BUILD)/libcollage_cuda.so $(BUILD)/libcollage.so
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -I$(CUDA_HOME)/include -o $@ $< $(BUILD)/obj/gpu/exhaustive.o -L$(BUILD) -l:libcollage_cuda.so -l:libcollage.so -lstdc++ \
	  -Wl,-rpath,'$$ORIGIN/..' -L$(CUDA_HOME)/lib64 -lcudart $(LDLIBS_ALL)
$(BUILD)/collage: $(CLI_OBJ) $(BUILD)/libcollage.a
	$(CC) $(CFLAGS_ALL) -o $@ $(CLI_OBJ) $(BUILD)/libcollage.a $(LDLIBS_ALL) $(MPI_LIBS)
$(BUILD)/tests/%: tests/%.c $(BUILD)/libcollage.a $(HDRS) | $(BUILD)/tests
	$(CC) $(CFLAGS_ALL) $(SRC_INC) -o $@ $< $(BUILD)/libcollage.a $(LDLIBS_ALL) -lmpfr -lgmp

# The install test, with this build's compiler, sanitizer flags and settings written in.
$(BUILD)/tests/test_install: tests/test_install.sh Makefile | $(BUILD)/tests
	sed -e 's|@BUILD@|$(BUILD)|' -e 's|@CC@|$(CC)|' -e 's|@XFLAGS@|$(LDSAN)|' \
	    -e 's|@MAKEVARS@|CC=$(CC) SAN=$(SAN) OMP=$(OMP)|' $< > $@ && chmod +x $@

# The Python suite, with this build's library and sanitizer setting written in.
$(BUILD)/tests/test_python: tests/test_python.sh Makefile | $(BUILD)/tests
	sed -e 's|@BUILD@|$(BUILD)|' -e 's|@SAN@|$(SAN)|' -e 's|@TORCH@|1|' $< > $@ && chmod +x $@
# The same suite on the pinned PyTorch 2 (python/torch2-pin.txt, scripts/torch2-env.sh).
$(BUILD)/tests/test_python_torch2: tests/test_python.sh Makefile | $(BUILD)/tests
	sed -e 's|@BUILD@|$(BUILD)|' -e 's|@SAN@|$(SAN)|' -e 's|@TORCH@|2|' $< > $@ && chmod +x $@

# make python: the collage Python package installed without network into a virtual environment,
# $(BUILD)/venv, that sees Debian's torch and numpy; it loads this build's libcollage.so
# (then: . $(BUILD)/venv/bin/activate). In an environment of your own: pip install ./python.
python: lib
	@test -x $(BUILD)/venv/bin/pip || /usr/bin/python3 -m venv --system-site-packages $(BUILD)/venv
	COLLAGE_LIB=$(abspath $(BUILD))/libcollage.so $(BUILD)/venv/bin/pip install --no-index -q ./python
	@rm -rf python/build python/collage.egg-info
	@echo "collage for Python installed in $(BUILD)/venv: . $(BUILD)/venv/bin/activate"

setup:
	@bash scripts/setup.sh

# Fails when a file of cli/ includes a private header (CI runs it through tests/test_install.sh).
check-headers:
	@bash scripts/check-headers.sh

# make install [PREFIX=/usr/local] [DESTDIR=] [CUDA=1]: the library (static, and shared as Debian installs one:
# libcollage.so.X.Y.Z with the SONAME link libcollage.so.X.Y and the link libcollage.so that -lcollage
# finds), the public headers, collage.pc for pkg-config, and the collage command. Where the loader
# searches PREFIX/lib (/usr/local/lib, /usr/lib: ldconfig's directories), install runs ldconfig (not
# under DESTDIR: a package's scripts do); elsewhere collage.pc's Libs carry -Wl,-rpath to it, so that a
# program built with `pkg-config --libs collage` runs without LD_LIBRARY_PATH. Either way it says which.
PREFIX  ?= /usr/local
LIBDIR   = $(PREFIX)/lib
# collage_cuda.h goes with libcollage_cuda (CUDA=1) only
INSTALL_HDRS = $(if $(filter 1,$(CUDA)),$(wildcard include/*.h),$(filter-out include/collage_cuda.h,$(wildcard include/*.h)))
VERSION := $(shell sed -n 's/^\#define COLLAGE_VERSION_STRING "\(.*\)"/\1/p' include/collage.h)
SONAME  := libcollage.so.$(word 1,$(subst ., ,$(VERSION))).$(word 2,$(subst ., ,$(VERSION)))
LDCONFIG ?= $(or $(firstword $(wildcard /sbin/ldconfig /usr/sbin/ldconfig)),ldconfig)
# 1 when the loader searches LIBDIR (a directory listed by ldconfig, or one of its trusted /lib, /usr/lib)
LOADER_DIR = $(if $(filter $(abspath $(LIBDIR)),/lib /usr/lib $(patsubst %:,%,$(shell $(LDCONFIG) -v -N -X 2>/dev/null \
               | grep -o '^/[^:]*:'))),1,0)
RPATH    = $(if $(filter 1,$(LOADER_DIR)),,-Wl,-rpath,$${libdir})
install: all
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin
	install -m 644 $(BUILD)/libcollage.a $(DESTDIR)$(LIBDIR)/
	install -m 755 $(BUILD)/libcollage.so $(DESTDIR)$(LIBDIR)/libcollage.so.$(VERSION)
	ln -sf libcollage.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libcollage.so
	install -m 644 $(INSTALL_HDRS) $(DESTDIR)$(PREFIX)/include/
ifeq ($(CUDA),1)
	install -m 755 $(BUILD)/libcollage_cuda.so $(DESTDIR)$(LIBDIR)/
endif
	install -m 755 $(BUILD)/collage $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' -e 's|@LIBS_PRIVATE@|$(strip $(LDLIBS_ALL))|' \
	    -e 's|@RPATH@|$(RPATH)|' collage.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/collage.pc
ifeq ($(LOADER_DIR)$(DESTDIR),1)
	$(LDCONFIG) || echo "note: ldconfig failed (not root?): run it as root before starting a program that uses libcollage"
	@echo "note: $(LIBDIR) is a directory the loader searches: ldconfig has registered $(SONAME)"
else ifeq ($(LOADER_DIR),1)
	@echo "note: installed under DESTDIR: run ldconfig once the files are in $(LIBDIR)"
else
	@echo "note: the loader does not search $(LIBDIR): collage.pc links with -Wl,-rpath,$(LIBDIR), so programs built with"
	@echo "      pkg-config --libs collage find the library; others need -Wl,-rpath,$(LIBDIR) or LD_LIBRARY_PATH=$(LIBDIR)"
endif

# The test command of the README: set-up, build, every test, one closing line "N passed, N failed".
test: setup
	@$(MAKE) --no-print-directory all tests
	@bash tests/run.sh $(BUILD)

# libFuzzer over the file readers and the tokenizers (tests/fuzz/fuzz_inputs.c), with clang: the
# library built into FUZZ_BUILD under ASan + UBSan with coverage, then, for example,
#   build-fuzz/fuzz_inputs -max_total_time=60        (or -runs=N; a crash leaves its input as crash-*)
FUZZ_BUILD ?= build-fuzz
fuzz:
	@$(MAKE) --no-print-directory $(FUZZ_BUILD)/libcollage.a BUILD=$(FUZZ_BUILD) CC=clang SAN=1 OMP=0 MPI=0 \
	  CFLAGS=-fsanitize=fuzzer-no-link
	clang -std=c11 -O1 -g -Wall -Wextra $(filter -Werror,$(CFLAGS_BASE)) -D_GNU_SOURCE -Iinclude $(SRC_INC) \
	  -fsanitize=fuzzer,address,undefined \
	  -fno-sanitize-recover=undefined tests/fuzz/fuzz_inputs.c $(FUZZ_BUILD)/libcollage.a -lopenblas -lm \
	  -o $(FUZZ_BUILD)/fuzz_inputs

# The main job: set-up, build, train the default model on the default corpus (the fortunes), sample.
# Each `make run` is a new run: --overwrite lets it replace the one a previous `make run` saved.
run: setup
	@$(MAKE) --no-print-directory all
	@mkdir -p runs
	$(BUILD)/collage train --save runs/default --overwrite --log runs/default.jsonl
	$(BUILD)/collage sample --checkpoint runs/default --prompt "The " --tokens 300

ci-san:
	@$(MAKE) --no-print-directory test BUILD=build-san SAN=1
ci-noomp:
	@$(MAKE) --no-print-directory test BUILD=build-noomp OMP=0

clean:
	rm -rf build build-san build-noomp runs
