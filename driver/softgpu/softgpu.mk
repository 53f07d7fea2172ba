# driver/softgpu/softgpu.mk: the emulated GPUs of the qemu test bed (included by the top Makefile).
#
#   make softgpu-module    build $(BUILD)/softgpu/huvm-softgpu.ko against Debian's linux-headers-amd64
#
# Test hardware only: the module is never installed on a lab server (docs/softgpu.md).
# SOFTGPU_BUILD may point elsewhere to build a scratch variant (SOFTGPU_SRC: another copy of the sources).

SOFTGPU_SRC   ?= $(ROOT)/driver/softgpu
SOFTGPU_BUILD ?= $(BUILD)/softgpu
SOFTGPU_KO    := $(SOFTGPU_BUILD)/huvm-softgpu.ko
SOFTGPU_DEPS  := $(wildcard $(SOFTGPU_SRC)/*.c $(SOFTGPU_SRC)/*.h) $(SOFTGPU_SRC)/Kbuild \
                 $(ROOT)/driver/include/uapi/huvm_softgpu_ioctl.h

.PHONY: softgpu-module softgpu-clean softgpu-obj
softgpu-module: $(SOFTGPU_KO)

$(SOFTGPU_KO): $(SOFTGPU_DEPS) $(HUVM_ORIG_STAMP)
	@[ -n "$(KTEST_KVER)" ] || { echo "softgpu: linux-headers-amd64 is not installed (make deps)" >&2; exit 1; }
	@rm -rf $(SOFTGPU_BUILD) && mkdir -p $(SOFTGPU_BUILD)
	@for f in $(SOFTGPU_SRC)/Kbuild $(SOFTGPU_SRC)/*.c $(SOFTGPU_SRC)/*.h; do ln -s $$f $(SOFTGPU_BUILD)/; done
	@echo "softgpu: building huvm-softgpu.ko for $(KTEST_KVER)"
	@$(MAKE) --no-print-directory -C $(KTEST_KDIR) M=$(SOFTGPU_BUILD) HUVM_ROOT=$(ROOT) \
	    SOFTGPU_UPSTREAM=$(HUVM_ORIG) modules 2>&1 | grep -v 'Skipping BTF generation' || true
	@[ -f $@ ] || { echo "softgpu: build failed" >&2; exit 1; }

softgpu-clean:
	rm -rf $(SOFTGPU_BUILD)

# Compile one object only (while a part is being written): make softgpu-obj OBJ=sg_engine.o
softgpu-obj:
	@mkdir -p $(SOFTGPU_BUILD)-$(basename $(OBJ)) && rm -f $(SOFTGPU_BUILD)-$(basename $(OBJ))/* 2>/dev/null; \
	 for f in $(SOFTGPU_SRC)/Kbuild $(SOFTGPU_SRC)/*.c $(SOFTGPU_SRC)/*.h; do ln -sf $$f $(SOFTGPU_BUILD)-$(basename $(OBJ))/; done
	@$(MAKE) --no-print-directory -C $(KTEST_KDIR) M=$(SOFTGPU_BUILD)-$(basename $(OBJ)) HUVM_ROOT=$(ROOT) \
	    SOFTGPU_UPSTREAM=$(HUVM_ORIG) $(OBJ)
