# driver/softgpu/softgpu.mk: the emulated GPUs of the qemu test bed (included by the top Makefile).
#
#   make softgpu-module    build $(BUILD)/softgpu/huvm-softgpu.ko against Debian's linux-headers-amd64, speaking
#                          the nvUvmInterface ABI of the upstream's branch (UPSTREAM=580.142: $(BUILD)/softgpu-580.142)
#
# Test hardware only: the module is never installed on a lab server (docs/softgpu.md).
# SOFTGPU_BUILD may point elsewhere to build a scratch variant (SOFTGPU_SRC: another copy of the sources).

SOFTGPU_SRC   ?= $(ROOT)/driver/softgpu
SOFTGPU_BUILD ?= $(BUILD)/softgpu$(HUVM_VSUFFIX)
SOFTGPU_KO    := $(SOFTGPU_BUILD)/huvm-softgpu.ko
SOFTGPU_DEPS  := $(wildcard $(SOFTGPU_SRC)/*.c $(SOFTGPU_SRC)/*.h) $(SOFTGPU_SRC)/Kbuild \
                 $(ROOT)/driver/include/uapi/huvm_softgpu_ioctl.h

.PHONY: softgpu-module softgpu-clean softgpu-obj
softgpu-module: $(SOFTGPU_KO)

$(SOFTGPU_KO): $(SOFTGPU_DEPS) $(HUVM_ORIG_STAMP)
	@[ -n "$(VM_KVER)" ] || { echo "softgpu: linux-headers-amd64 is not installed (make deps)" >&2; exit 1; }
	@rm -rf $(SOFTGPU_BUILD) && mkdir -p $(SOFTGPU_BUILD)
	@for f in $(SOFTGPU_SRC)/Kbuild $(SOFTGPU_SRC)/*.c $(SOFTGPU_SRC)/*.h; do ln -s $$f $(SOFTGPU_BUILD)/; done
	@echo "softgpu: building huvm-softgpu.ko for $(VM_KVER)"
	@$(MAKE) --no-print-directory -C $(VM_KDIR) M=$(SOFTGPU_BUILD) HUVM_ROOT=$(ROOT) \
	    SOFTGPU_UPSTREAM=$(HUVM_ORIG) modules 2>&1 | grep -v 'Skipping BTF generation' || true
	@[ -f $@ ] || { echo "softgpu: build failed" >&2; exit 1; }

softgpu-clean:
	rm -rf $(SOFTGPU_BUILD)

# Compile one object only (while a part is being written): make softgpu-obj OBJ=sg_engine.o
softgpu-obj:
	@mkdir -p $(SOFTGPU_BUILD)-$(basename $(OBJ)) && rm -f $(SOFTGPU_BUILD)-$(basename $(OBJ))/* 2>/dev/null; \
	 for f in $(SOFTGPU_SRC)/Kbuild $(SOFTGPU_SRC)/*.c $(SOFTGPU_SRC)/*.h; do ln -sf $$f $(SOFTGPU_BUILD)-$(basename $(OBJ))/; done
	@$(MAKE) --no-print-directory -C $(VM_KDIR) M=$(SOFTGPU_BUILD)-$(basename $(OBJ)) HUVM_ROOT=$(ROOT) \
	    SOFTGPU_UPSTREAM=$(HUVM_ORIG) $(OBJ)

# ---- nvidia-uvm.ko for the test bed, linked against the software GPU ----------------------------------
#   make uvm-stock-module   [UVM_BUILD_TYPE=release|debug]  NVIDIA's UNPATCHED nvidia-uvm (from
#                           $(HUVM_ORIG)) -> $(HUVM_MODULES)/stock-<type>/nvidia-uvm.ko
#   make uvm-patched-module [UVM_BUILD_TYPE=release|debug]  the huvm-patched one (as `make module`)
#                           -> $(HUVM_MODULES)/patched-<type>/nvidia-uvm.ko
# Both resolve the 68 nvUvmInterface* imports against huvm-softgpu.ko's Module.symvers (KBUILD_EXTRA_SYMBOLS):
# modpost checks every import, records its CRC and writes `depends: huvm-softgpu`. The directory names
# are the test bed's variant names (VM_SOFTGPU_VARIANTS, tests/vm/vm.mk). `make module` and module-test
# ($(HUVM_MODULES)/release, debug) are not touched. Like `make module`, a second run with nothing changed
# runs no kbuild: the stamps below depend on the sources, the kernel tree's identity and the CONTENT of
# the software GPU's Module.symvers (a rebuilt softgpu with the same exports relinks nothing).
SOFTGPU_SYMVERS    := $(SOFTGPU_BUILD)/Module.symvers
SOFTGPU_UVM_SYMVERS := $(HUVM_MODULES)/softgpu.symvers
HUVM_ORIG_FILES     = $(shell find $(HUVM_ORIG) -type f ! -name .huvm-upstream 2>/dev/null)

.PHONY: uvm-stock-module uvm-patched-module
uvm-stock-module: $(HUVM_MODULES)/stock-$(UVM_BUILD_TYPE)/.huvm-built
	@echo "nvidia-uvm.ko (stock, $(UVM_BUILD_TYPE)): $(HUVM_MODULES)/stock-$(UVM_BUILD_TYPE)/nvidia-uvm.ko"

uvm-patched-module: $(HUVM_MODULES)/patched-$(UVM_BUILD_TYPE)/.huvm-built
	@echo "nvidia-uvm.ko (patched, $(UVM_BUILD_TYPE)): $(HUVM_MODULES)/patched-$(UVM_BUILD_TYPE)/nvidia-uvm.ko"

# A copy that changes only when the exports do.
$(SOFTGPU_UVM_SYMVERS): $(SOFTGPU_KO)
	@mkdir -p $(@D)
	@grep -q 'nvUvmInterfaceRegisterGpu' $(SOFTGPU_SYMVERS) || \
	    { echo "softgpu: $(SOFTGPU_SYMVERS) exports no nvUvmInterface* symbols" >&2; exit 1; }
	@cmp -s $(SOFTGPU_SYMVERS) $@ || cp $(SOFTGPU_SYMVERS) $@

# These patterns have shorter stems than build.mk's $(HUVM_MODULES)/%/..., so make prefers them for
# stock-* and patched-*; the kernel identity stamp records the softgpu symvers instead of NVIDIA_SYMVERS.
$(HUVM_MODULES)/stock-%/.huvm-kernel $(HUVM_MODULES)/patched-%/.huvm-kernel: override NVIDIA_SYMVERS = $(SOFTGPU_UVM_SYMVERS)
.PRECIOUS: $(HUVM_MODULES)/stock-%/.huvm-built $(HUVM_MODULES)/patched-%/.huvm-built

$(HUVM_MODULES)/stock-%/.huvm-built: $(HUVM_MODULES)/stock-%/.huvm-kernel $(SOFTGPU_UVM_SYMVERS) \
                                     $(HUVM_ORIG_STAMP) $(HUVM_ORIG_FILES)
	@UVM_BUILD_TYPE=$* NVIDIA_SYMVERS=$(SOFTGPU_UVM_SYMVERS) bash $(HUVM_SCRIPTS)/huvm-module.sh --stock $(@D)
	@touch $@

$(HUVM_MODULES)/patched-%/.huvm-built: $(HUVM_MODULES)/patched-%/.huvm-kernel $(SOFTGPU_UVM_SYMVERS) \
                                       $(HUVM_MODULES)/.huvm-files $(HUVM_WORK_STAMP) $(HUVM_DRIVER_FILES) \
                                       $(HUVM_WORK_FILES)
	@UVM_BUILD_TYPE=$* DRIVER=$(HUVM_DRIVER) NVIDIA_SYMVERS=$(SOFTGPU_UVM_SYMVERS) \
	    bash $(HUVM_SCRIPTS)/huvm-module.sh $(@D)
	@touch $@
