# huvm: the portable policy core (driver/core), included by the top Makefile.
#
#   make core-test     C unit tests (tests/c), natively and under ASan+UBSan, plus a no-float build check
#   make core-kcheck   the core compiled as an out-of-tree kernel module (-Werror) and checked by sparse
#   make bench-core    median cost of an eviction decision on an 8-GPU node, no heap allocation
#   make core-cffi     rebuild the Python extension huvm._huvm_cffi in place when C sources change

.PHONY: core-test core-kcheck bench-core core-cffi

CORE_DIR     := $(ROOT)/driver/core
CORE_INC     := -I$(ROOT)/driver/include/uapi -I$(CORE_DIR)
# Every build takes all of them: huvm_dispatch_test.c (the test commands, apart from production dispatch as
# NVIDIA's uvm_*_test.c) is reached only through huvm_dispatch()'s test gate (caller->allow_test).
CORE_SRCS    := $(wildcard $(CORE_DIR)/*.c)
CORE_HDRS    := $(wildcard $(CORE_DIR)/*.h) $(ROOT)/driver/include/uapi/uvm_huvm_ioctl.h
CORE_OUT     := $(BUILD)/core
CORE_TEST_SRCS := $(filter-out %/kcheck_main.c %/bench_core.c,$(wildcard $(ROOT)/tests/c/*.c))
CORE_TEST_HDRS := $(wildcard $(ROOT)/tests/c/*.h)
CORE_CC      ?= gcc
CORE_CFLAGS  := -std=gnu11 -Wall -Wextra -Werror -g $(CORE_INC)
CORE_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
KDIR         ?= /lib/modules/$(shell uname -r)/build

# Skip with a reason, or fail when CI=true (the rule of tests/conftest.py's require_or_skip).
define core_skip
if [ "$${CI:-}" = "true" ]; then echo "core: FAIL (CI=true): $(1)" >&2; exit 1; fi; echo "core: SKIP: $(1)"
endef

$(CORE_OUT)/test_core: $(CORE_SRCS) $(CORE_HDRS) $(CORE_TEST_SRCS) $(CORE_TEST_HDRS)
	@mkdir -p $(@D)
	$(CORE_CC) $(CORE_CFLAGS) -O1 -DHUVM_TRACE_HOOK=huvm_test_trace_hook -o $@ $(CORE_SRCS) $(CORE_TEST_SRCS)

$(CORE_OUT)/test_core_san: $(CORE_SRCS) $(CORE_HDRS) $(CORE_TEST_SRCS) $(CORE_TEST_HDRS)
	@mkdir -p $(@D)
	$(CORE_CC) $(CORE_CFLAGS) -O1 $(CORE_SAN) -DHUVM_TRACE_HOOK=huvm_test_trace_hook -o $@ $(CORE_SRCS) $(CORE_TEST_SRCS)

# No floating point in the core: -mgeneral-regs-only makes any float operation a compile error.
$(CORE_OUT)/nofloat.stamp: $(CORE_SRCS) $(CORE_HDRS)
	@mkdir -p $(@D)
	@for f in $(CORE_SRCS); do $(CORE_CC) $(CORE_CFLAGS) -O2 -mgeneral-regs-only -c $$f -o $(CORE_OUT)/nofloat.o || exit 1; done
	@rm -f $(CORE_OUT)/nofloat.o
	@touch $@

core-test: $(CORE_OUT)/test_core $(CORE_OUT)/test_core_san $(CORE_OUT)/nofloat.stamp
	@echo "== core: C unit tests (native) =="
	@$(CORE_OUT)/test_core
	@echo "== core: C unit tests (ASan+UBSan) =="
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 $(CORE_OUT)/test_core_san

# Kernel mode: the core's .c files plus tests/c/kcheck_main.c (CREATE_TRACE_POINTS) as a module, never loaded.
CORE_KCHECK := $(BUILD)/core-kcheck
core-kcheck: $(CORE_SRCS) $(CORE_HDRS) $(ROOT)/driver/uvm/uvm_huvm_trace.h $(ROOT)/tests/c/kcheck_main.c
	@if [ ! -e "$(KDIR)/Makefile" ]; then $(call core_skip,no kernel headers at $(KDIR) (make deps)); exit 0; fi; \
	rm -rf $(CORE_KCHECK) && mkdir -p $(CORE_KCHECK) && \
	for f in $(CORE_SRCS) $(ROOT)/tests/c/kcheck_main.c; do ln -sf $$f $(CORE_KCHECK)/; done && \
	objs="kcheck_main.o $(patsubst %.c,%.o,$(notdir $(CORE_SRCS)))" && \
	printf 'obj-m := huvm_kcheck.o\nhuvm_kcheck-y := %s\nccflags-y := -Werror -I%s -I%s -I%s\n' \
	    "$$objs" "$(CORE_DIR)" "$(ROOT)/driver/include/uapi" "$(ROOT)/driver/uvm" > $(CORE_KCHECK)/Kbuild && \
	echo "== core: kernel-mode build (-Werror) against $(KDIR) ==" && \
	$(MAKE) -s -C $(KDIR) M=$(CORE_KCHECK) modules && \
	if ! command -v sparse >/dev/null; then $(call core_skip,sparse not installed (make deps)); exit 0; fi; \
	echo "== core: sparse ==" && \
	touch $(CORE_KCHECK)/*.c && \
	$(MAKE) -s -C $(KDIR) M=$(CORE_KCHECK) C=2 CHECK=sparse modules > $(CORE_KCHECK)/sparse.log 2>&1; \
	rc=$$?; cat $(CORE_KCHECK)/sparse.log; \
	if [ $$rc -ne 0 ] || grep -E -q 'warning:|error:' $(CORE_KCHECK)/sparse.log; then echo "core: sparse is not clean" >&2; exit 1; fi; \
	echo "core-kcheck: kernel build and sparse clean"

$(CORE_OUT)/bench_core: $(CORE_SRCS) $(CORE_HDRS) $(ROOT)/tests/c/bench_core.c
	@mkdir -p $(@D)
	$(CORE_CC) -std=gnu11 -Wall -Wextra -Werror -O2 $(CORE_INC) -o $@ $(CORE_SRCS) $(ROOT)/tests/c/bench_core.c

bench-core: $(CORE_OUT)/bench_core
	@$(CORE_OUT)/bench_core

# The extension is built in place by `pip install -e pyctl` (make venv); rebuild it when C changes. --force:
# build_ext compares only the .c files' times with the module's, so a changed header (an inline function of
# huvm_sim_internal.h, the ABI header) would leave the old module in place.
CORE_CFFI_STAMP := $(CORE_OUT)/cffi.stamp
$(CORE_CFFI_STAMP): $(CORE_SRCS) $(CORE_HDRS) $(ROOT)/pyctl/huvm/_build.py $(ROOT)/pyctl/setup.py \
                    $(wildcard $(ROOT)/driver/include/uapi/*.h $(ROOT)/driver/sim/*.c $(ROOT)/driver/sim/*.h) | $(VENV_STAMP)
	@mkdir -p $(@D)
	cd $(ROOT)/pyctl && $(PY) setup.py -q build_ext --force --inplace --build-temp $(CORE_OUT)/cffi-temp >/dev/null
	@touch $@
core-cffi: $(CORE_CFFI_STAMP)

venv: $(CORE_CFFI_STAMP)
test: core-test core-kcheck
bench: bench-core
