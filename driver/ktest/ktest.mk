# driver/ktest/ktest.mk: the qemu test bed's kernel module (included by the top Makefile).
#
#   make ktest-module     build $(BUILD)/ktest/huvm-ktest.ko against Debian's linux-headers-amd64
#
# KTEST_KVER is the kernel ABI the installed linux-headers-amd64 meta package points at (never hard-coded);
# tests/vm/run-vm.sh boots linux-image-$(KTEST_KVER). KTEST_CORE may point at a copy of driver/core and
# KTEST_BUILD elsewhere, to build a scratch variant (docs/testing.md: the broken-build check).

KTEST_KVER  ?= $(shell dpkg-query -W -f='$${Depends}' linux-headers-amd64 2>/dev/null | \
                 sed -n 's/^linux-headers-\([^ ,]*\).*/\1/p')
KTEST_KDIR  ?= /lib/modules/$(KTEST_KVER)/build
KTEST_CORE  ?= $(ROOT)/driver/core
KTEST_BUILD ?= $(BUILD)/ktest
KTEST_KO    := $(KTEST_BUILD)/huvm-ktest.ko
KTEST_DEPS  := $(ROOT)/driver/ktest/Kbuild $(ROOT)/driver/ktest/huvm_ktest.c \
               $(wildcard $(KTEST_CORE)/*.c $(KTEST_CORE)/*.h) \
               $(ROOT)/driver/include/uapi/uvm_huvm_ioctl.h $(wildcard $(ROOT)/driver/uvm/uvm_huvm_trace.h)
export KTEST_KVER

.PHONY: ktest-module ktest-clean
ktest-module: $(KTEST_KO)

$(KTEST_KO): $(KTEST_DEPS)
	@[ -n "$(KTEST_KVER)" ] || { echo "ktest: linux-headers-amd64 is not installed (make deps)" >&2; exit 1; }
	@[ -d "$(KTEST_KDIR)" ] || { echo "ktest: no kernel build tree at $(KTEST_KDIR)" >&2; exit 1; }
	@rm -rf $(KTEST_BUILD) && mkdir -p $(KTEST_BUILD)
	@ln -s $(ROOT)/driver/ktest/Kbuild $(ROOT)/driver/ktest/huvm_ktest.c $(KTEST_BUILD)/
	@for f in $(KTEST_CORE)/*.c; do ln -s $$f $(KTEST_BUILD)/; done
	@echo "ktest: building huvm-ktest.ko for $(KTEST_KVER) (core: $(KTEST_CORE))"
	@$(MAKE) --no-print-directory -C $(KTEST_KDIR) M=$(KTEST_BUILD) HUVM_ROOT=$(ROOT) \
	    HUVM_CORE=$(KTEST_CORE) modules 2>&1 | grep -v 'Skipping BTF generation' || true
	@[ -f $@ ] || { echo "ktest: build failed" >&2; exit 1; }

ktest-clean:
	rm -rf $(KTEST_BUILD)
