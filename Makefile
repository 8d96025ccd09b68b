# tandem — one Makefile, read top to bottom as the table of contents.
#
#   make            build build/tandem (+ build/libxrt_emu.so, + build/libtandem_cuda.so and its fp16 twin
#                   build/libtandem_cuda_f16.so when nvcc exists)
#   make run        install what running needs, build, start the daemon on the bundled
#                   stories260K model (ARGS="--port 8081" or TANDEM_* variables change it)
#   make test       install the test tools too, build, run every test; last line "N passed, N failed"
#   make deps       install the Debian packages the build and the tests need (idempotent)
#   make SAN=1 ...  the same with ASan+UBSan, into build/san/ (make test-san runs the tests so)
#   make SAN=thread ... ThreadSanitizer, into build/tsan/ (make test-tsan; without CUDA)
#   make CUDA=0     skip the CUDA backend even when nvcc is present
#   make install    binary, unit file and example config under $(PREFIX) / /etc (DESTDIR stages;
#                   install-files copies an existing build without building)

# ---------------------------------------------------------------- toolchain
CC       ?= cc
SAN      ?= 0
PORTABLE ?= 0
PREFIX   ?= /usr/local
BUILD    := build
ifeq ($(SAN),1)
BUILD    := build/san
endif
ifeq ($(SAN),thread)
BUILD    := build/tsan
endif

NVCC ?= $(shell command -v nvcc 2>/dev/null || (test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc))
ifeq ($(NVCC),)
CUDA ?= 0
else
CUDA ?= 1
endif

PKGS     := libuv jansson libpcre2-8 libcrypto libsystemd icu-uc ucx
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

OPT      := -O3
ifeq ($(PORTABLE),0)
OPT      += -march=native
endif
CFLAGS   ?= $(OPT) -g
CFLAGS   += -std=c11 -D_GNU_SOURCE -pthread -Wall -Wextra -Wno-unused-parameter \
            -fno-strict-aliasing -fPIC -I. -I$(BUILD) $(PKG_CFLAGS) -MMD -MP
LDLIBS   += $(PKG_LIBS) -lm -ldl -pthread
ifeq ($(SAN),1)
CFLAGS   += -fsanitize=address,undefined -fno-omit-frame-pointer -O1
LDFLAGS  += -fsanitize=address,undefined
endif
ifeq ($(SAN),thread)
CFLAGS   += -fsanitize=thread -fno-omit-frame-pointer -O1
LDFLAGS  += -fsanitize=thread
# libuv's descriptors closed where TSan sees it (san/tsan_close.c says why); linked first
TSAN_OBJ := $(BUILD)/obj/san/tsan_close.o
LDLIBS   := $(TSAN_OBJ) $(LDLIBS)
endif

# ---------------------------------------------------------------- sources
# Every module folder is globbed: a new file joins the build without touching this file.
# model/ is globbed one level down too (model/ckpt, tok, tmpl, sample, gen).
# The subcommands (daemon/main.c, daemon/cmd_*.c) link into the binary directly, the rest through
# build/libtandem.a, which the tests and the plugins link too.
MAIN_SRC := daemon/main.c $(wildcard daemon/cmd_*.c)
LIB_SRC  := $(filter-out $(MAIN_SRC),$(wildcard proto/*.c model/*.c model/*/*.c sparse/*.c scheduler/*.c \
                                          cpu/*.c fpga/*.c peer/*.c devices/*.c daemon/*.c))
EMU_SRC  := $(wildcard fpga/emu/*.c fpga/kernels/*.c)
TEST_SRC := $(wildcard tests/*.c tests/*/*.c)
TOOL_SRC := $(wildcard tools/*.c)
GPU_CU   := $(wildcard gpu/*.cu)
GPU_C    := $(wildcard gpu/*.c)

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
MAIN_OBJ := $(MAIN_SRC:%.c=$(BUILD)/obj/%.o)
EMU_OBJ  := $(EMU_SRC:%.c=$(BUILD)/obj/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/obj/%.o)
TOOLS    := $(TOOL_SRC:tools/%.c=$(BUILD)/%)
GPU_OBJ  := $(GPU_CU:%.cu=$(BUILD)/obj/%.cu.o) $(GPU_C:%.c=$(BUILD)/obj/%.o)
# the same sources with fp16 in place of bf16 (gpu/h16.cuh): libtandem_cuda_f16.so
GPU_OBJ_F16 := $(GPU_CU:%.cu=$(BUILD)/obj-f16/%.cu.o) $(GPU_C:%.c=$(BUILD)/obj/%.o)

# Large third-party test data is tracked gzip-compressed (gzip is Essential in Debian: every machine
# has it) as tests/data/<path>.gz and unpacked to build/data/<path> (always build/, whatever BUILD
# is), which the tests and tools read; the daemon needs none of it. Where make does not run (the
# GPU machine), tools/testdata.sh unpacks the same files.
TEST_DATA := $(patsubst tests/data/%.gz,build/data/%,$(shell find tests/data -name '*.gz' 2>/dev/null))

TARGETS  := $(BUILD)/tandem $(BUILD)/libxrt_emu.so $(BUILD)/tandem-tests $(TOOLS) $(TEST_DATA)
ifeq ($(CUDA),1)
ifneq ($(GPU_CU)$(GPU_C),)
TARGETS  += $(BUILD)/libtandem_cuda.so $(BUILD)/libtandem_cuda_f16.so
endif
endif

.PHONY: all deps run test test-unit test-san test-tsan bench install install-files clean format
all: $(TARGETS)

# ---------------------------------------------------------------- rules
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libtandem.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/tandem: $(MAIN_OBJ) $(BUILD)/libtandem.a
	$(CC) $(LDFLAGS) -rdynamic -o $@ $^ $(LDLIBS)

# The FPGA emulator is a separate shared library that exports the XRT C API, loaded with dlopen
# exactly as the real libxrt_coreutil.so.2 would be.
$(BUILD)/libxrt_emu.so: $(EMU_OBJ) $(BUILD)/libtandem.a
	$(CC) $(LDFLAGS) -shared -o $@ $(EMU_OBJ) $(BUILD)/libtandem.a $(LDLIBS)

# Tests: every `TEST(name)` in tests/ is listed by this generated header (libuv's test-list idea,
# without a hand-kept list).
$(BUILD)/test_list.h: $(TEST_SRC)
	@mkdir -p $(dir $@)
	@grep -ho '^TEST([a-z0-9_]*)' $(TEST_SRC) | sed 's/^TEST(\(.*\))/X(\1)/' > $@.tmp
	@cmp -s $@.tmp $@ || mv $@.tmp $@; rm -f $@.tmp

$(BUILD)/obj/tests/main.o: $(BUILD)/test_list.h

# The FPGA tests dlopen the emulator as the daemon does (order-only: not linked in), and read the
# unpacked test data.
$(BUILD)/tandem-tests: $(TEST_OBJ) $(BUILD)/libtandem.a | $(BUILD)/libxrt_emu.so $(TEST_DATA)
	$(CC) $(LDFLAGS) -rdynamic -o $@ $^ $(LDLIBS)

build/data/%: tests/data/%.gz
	@mkdir -p $(dir $@)
	gzip -dc $< > $@.tmp && mv $@.tmp $@

$(BUILD)/%: tools/%.c $(BUILD)/libtandem.a
	$(CC) $(CFLAGS) $(LDFLAGS) -rdynamic -o $@ $(filter %.c,$^) $(BUILD)/libtandem.a $(LDLIBS)

# A tool too large for one file keeps its parts in tools/NAME/, linked beside tools/NAME.c.
$(BUILD)/bench_gpu: $(wildcard tools/bench_gpu/*.c tools/bench_gpu/*.h)

ifeq ($(SAN),thread)
$(BUILD)/tandem $(BUILD)/tandem-tests $(BUILD)/libxrt_emu.so $(TOOLS): | $(TSAN_OBJ)
endif

# ---------------------------------------------------------------- CUDA backend (dlopen'ed plugin)
# sm_90a (not plain sm_90): Hopper's wgmma, used by gpu/attn_prefill_sm90.cu; the compute_90 PTX
# runs elsewhere without it (the plugin checks which one it got).
NVFLAGS ?= -O3 -std=c++17 -Xcompiler -fPIC -I. -gencode=arch=compute_90a,code=sm_90a \
           -gencode=arch=compute_90,code=compute_90 -lineinfo
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj-f16/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -DGPU_H16_F16 -MMD -MP -c $< -o $@

# The plugin binds to the host's functions and shares its structs (model, accel_opts, accel_dev):
# both are stamped with a hash of the headers that define them, and the host refuses a plugin whose
# stamp differs (a plugin built from another tree would otherwise crash in its first call).
# The header is rewritten only when the hash changes, so only a changed tree rebuilds what uses it.
ABI_HDRS := $(sort $(wildcard proto/*.h model/*.h model/*/*.h sparse/*.h scheduler/*.h cpu/*.h \
                              fpga/*.h peer/*.h devices/*.h) gpu/plugin.h gpu/gpu_xattn.h)
$(BUILD)/plugin_abi.h: $(ABI_HDRS)
	@mkdir -p $(dir $@)
	@printf '#define GPU_PLUGIN_ABI "%s"\n' "$$(cat $(ABI_HDRS) | sha256sum | cut -c1-16)" > $@.tmp
	@cmp -s $@.tmp $@ || mv $@.tmp $@; rm -f $@.tmp
$(BUILD)/obj/gpu/accel.o $(BUILD)/obj/devices/open.o $(BUILD)/obj/tests/devices/test_plugin_abi.o \
    $(BUILD)/obj/devices/sparse_index.o: \
    $(BUILD)/plugin_abi.h

$(BUILD)/libtandem_cuda.so: $(GPU_OBJ) $(BUILD)/libtandem.a
	$(CC) $(LDFLAGS) -shared -o $@ $(GPU_OBJ) -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
	    -lcublasLt -lcublas -lcudart -lstdc++ $(LDLIBS)

$(BUILD)/libtandem_cuda_f16.so: $(GPU_OBJ_F16) $(BUILD)/libtandem.a
	$(CC) $(LDFLAGS) -shared -o $@ $(GPU_OBJ_F16) -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
	    -lcublasLt -lcublas -lcudart -lstdc++ $(LDLIBS)

# The GPU tests' and benchmarks' entry points (gpu/test/: one kernel at a time on host arrays,
# kernel timings) are a library beside each plugin, linked against it, so that they drive the
# serving plugin's own kernels without the plugin exporting them (tests/gpu dlopen it).
GPU_TEST_CU := $(wildcard gpu/test/*.cu)
CUDA_TEST_LINK = $(CC) $(LDFLAGS) -shared -o $@ $(filter %.o,$^) -L$(BUILD) -l:$(notdir $(filter %.so,$^)) \
	    -Wl,-rpath,'$$ORIGIN' -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart -lstdc++ $(LDLIBS)
$(BUILD)/libtandem_cuda_test.so: $(GPU_TEST_CU:%.cu=$(BUILD)/obj/%.cu.o) $(BUILD)/libtandem_cuda.so
	$(CUDA_TEST_LINK)
$(BUILD)/libtandem_cuda_f16_test.so: $(GPU_TEST_CU:%.cu=$(BUILD)/obj-f16/%.cu.o) $(BUILD)/libtandem_cuda_f16.so
	$(CUDA_TEST_LINK)
ifeq ($(CUDA),1)
all: $(BUILD)/libtandem_cuda_test.so $(BUILD)/libtandem_cuda_f16_test.so
endif

# The lab plugin (make gpu-lab): the serving plugin's objects plus gpu/bench/'s kernel variants
# that lost (gpu/KERNELS.md), under the serving name in $(BUILD)/lab/, so that a program copied
# beside it, or opening it through accel_opts.lib_path, runs them. For benchmarks only.
GPU_LAB_CU := gpu/bench/decode_step.cu
.PHONY: gpu-lab
gpu-lab: $(BUILD)/lab/libtandem_cuda.so
$(BUILD)/lab/libtandem_cuda.so: $(GPU_OBJ) $(GPU_LAB_CU:%.cu=$(BUILD)/obj/%.cu.o)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -shared -o $@ $^ -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
	    -lcublasLt -lcublas -lcudart -lstdc++ $(LDLIBS)

# The engine's settings parser and decode curve (gpu/tuning.c, gpu/curve.c: plain C) are tested
# everywhere, with or without CUDA.
$(BUILD)/tandem-tests: $(BUILD)/obj/gpu/tuning.o $(BUILD)/obj/gpu/curve.o

# ---------------------------------------------------------------- workflows
# deps: TANDEM_DEPS_TEST=0 is what building and running need, 1 (the default) adds the test tools
deps:
	@tools/deps.sh

# run and test build with every core (JOBS=N to change it) unless make was given -j itself, whose
# jobserver the build then shares: a serial build of the two CUDA plugins is most of CI's time.
JOBS    ?= $(shell nproc 2>/dev/null || echo 1)
BUILD_J  = $(if $(filter -j%,$(MAKEFLAGS)),,-j$(JOBS))

# tools/run.sh prints the curl for the port the daemon's configuration gives, then starts it
run:
	@TANDEM_DEPS_TEST=0 tools/deps.sh
	@$(MAKE) --no-print-directory $(BUILD_J) all
	@tools/run.sh $(BUILD)/tandem $(ARGS)

test:
	@TANDEM_DEPS_TEST=1 tools/deps.sh
	@$(MAKE) --no-print-directory $(BUILD_J) all
	@BUILD=$(BUILD) tests/run.sh

test-unit: all
	@$(BUILD)/tandem-tests

test-san:
	@$(MAKE) --no-print-directory $(BUILD_J) SAN=1 all
	@BUILD=build/san tests/run.sh

# ThreadSanitizer (without the CUDA plugin): every process, daemons of the e2e scripts included,
# writes its reports to build/tsan/reports/tsan.<pid>; the run fails if any appear.
# UCX_MEM_EVENTS=no: UCX's memory hooks (libucm's madvise interceptor, which glibc calls as every
# thread exits) take a lock TSan's runtime no longer tracks for the exiting thread, and the
# process dies with SIGSEGV at exit; the hooks only serve UCX's RDMA registration cache.
# TSan runs 5-15x slower: each test gets 30 min (not 5) and the emulated card's run watchdog 10 min
# (not 30 s), which a busy machine's TSan prefill on the card overran; one test or script at a time.
test-tsan:
	@$(MAKE) --no-print-directory $(BUILD_J) SAN=thread CUDA=0 all
	@rm -rf build/tsan/reports && mkdir -p build/tsan/reports
	@BUILD=build/tsan UCX_MEM_EVENTS=no TSAN_OPTIONS="log_path=$(CURDIR)/build/tsan/reports/tsan" \
	    TANDEM_TEST_TIMEOUT=1800 TANDEM_FPGA_TIMEOUT_MS=600000 TANDEM_TEST_JOBS=1 tests/run.sh
	@if ls build/tsan/reports/tsan.* >/dev/null 2>&1; then \
	    echo "ThreadSanitizer reports:"; ls build/tsan/reports; exit 1; fi

bench: all
	$(BUILD)/tandem bench --model models/stories260K --device cpu

install: all
	@$(MAKE) --no-print-directory install-files

install-files:
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/tandem $(DESTDIR)/etc/tandem \
	    $(DESTDIR)/lib/systemd/system $(DESTDIR)$(PREFIX)/share/tandem/models
	install -m 755 $(BUILD)/tandem $(DESTDIR)$(PREFIX)/bin/tandem
	install -m 755 $(BUILD)/libxrt_emu.so $(DESTDIR)$(PREFIX)/lib/tandem/
	for p in libtandem_cuda.so libtandem_cuda_f16.so; do \
	    if [ -f $(BUILD)/$$p ]; then install -m 755 $(BUILD)/$$p $(DESTDIR)$(PREFIX)/lib/tandem/; fi; done
	cp -r models/stories260K $(DESTDIR)$(PREFIX)/share/tandem/models/
	install -d $(DESTDIR)$(PREFIX)/share/doc/tandem $(DESTDIR)/usr/lib/sysusers.d
	install -m 644 README.md deploy/tandem.conf.example $(DESTDIR)$(PREFIX)/share/doc/tandem/
	sed 's|/usr/local|$(PREFIX)|g' systemd/tandem.service > $(DESTDIR)/lib/systemd/system/tandem.service
	chmod 644 $(DESTDIR)/lib/systemd/system/tandem.service
	install -m 644 systemd/tandem.sysusers $(DESTDIR)/usr/lib/sysusers.d/tandem.conf
	if [ -z "$(DESTDIR)" ] && command -v systemd-sysusers >/dev/null; then systemd-sysusers tandem.conf || true; fi
	if [ -f deploy/tandem.conf.example ] && [ ! -f $(DESTDIR)/etc/tandem/tandem.conf ]; then \
	    install -m 644 deploy/tandem.conf.example $(DESTDIR)/etc/tandem/tandem.conf; fi

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu' '*.cuh')

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj $(BUILD)/obj-f16 -name '*.d' 2>/dev/null)

# ---------------------------------------------------------------- fuzzing (tests/fuzz/, FUZZING.md)
# libFuzzer harnesses, one per parser that takes outside bytes (tests/fuzz/harness/fuzz_*.c).
# The library sources they reach (proto/, model/) are built again with clang, the fuzzer's
# coverage instrumentation and ASan+UBSan into build/fuzz/ (UBSan aborts, so that libFuzzer
# counts it as a crash); each harness links them with libFuzzer's main.
#   make fuzz-build                 build/fuzz/fuzz_<name> for every harness
#   make fuzz [FUZZ_TIME=60]        each harness FUZZ_TIME seconds on a scratch copy of its
#                                   corpus (build/fuzz/run/<name>/); fails on a crash, a leak,
#                                   a timeout or an out-of-memory; FUZZ_ONLY="tmpl kv_wire" picks
FUZZ_CC      ?= clang
FUZZ_TIME    ?= 60
FUZZ_ONLY    ?=
FUZZ_DIR     := build/fuzz
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS  := -O1 -g $(filter -march=%,$(OPT)) -std=c11 -D_GNU_SOURCE -pthread -Wall -Wextra -Wno-unused-parameter \
                -fno-strict-aliasing -I. $(PKG_CFLAGS) -MMD -MP $(FUZZ_SAN)
FUZZ_LIB_OBJ := $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(filter proto/%.c model/%.c sparse/%.c daemon/http_parse.c peer/msg.c peer/auth.c daemon/config.c daemon/auth.c daemon/model_dir.c devices/exe_dir.c scheduler/accel.c,$(LIB_SRC)) $(EMU_SRC))
FUZZ_HELPERS := $(FUZZ_DIR)/obj/tests/fuzz/harness/harness_util.o \
                $(FUZZ_DIR)/obj/tests/fuzz/harness/tiny_model.o
FUZZ_NAMES   := $(patsubst tests/fuzz/harness/fuzz_%.c,%,$(wildcard tests/fuzz/harness/fuzz_*.c))
FUZZ_BINS    := $(FUZZ_NAMES:%=$(FUZZ_DIR)/fuzz_%)

.PHONY: fuzz fuzz-build
fuzz-build: $(FUZZ_BINS) $(FUZZ_DIR)/mkseeds

$(FUZZ_DIR)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_DIR)/libtandem_fuzz.a: $(FUZZ_LIB_OBJ) $(FUZZ_HELPERS)
	@rm -f $@
	ar rcs $@ $^

$(FUZZ_DIR)/fuzz_%: $(FUZZ_DIR)/obj/tests/fuzz/harness/fuzz_%.o $(FUZZ_DIR)/libtandem_fuzz.a
	$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ $(PKG_LIBS) -lm -ldl -pthread

# remakes the binary seeds (kv_wire, model_load): build/fuzz/mkseeds tests/fuzz/corpus
$(FUZZ_DIR)/mkseeds: tests/fuzz/harness/mkseeds.c tests/fuzz/harness/tiny_model.c proto/kv_wire.c proto/crc32c.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -O1 -g -std=c11 -D_GNU_SOURCE -pthread -I. -o $@ $^

fuzz: fuzz-build
	@FUZZ_TIME=$(FUZZ_TIME) tests/fuzz/run.sh $(or $(FUZZ_ONLY),$(FUZZ_NAMES))

-include $(shell find $(FUZZ_DIR)/obj -name '*.d' 2>/dev/null)
