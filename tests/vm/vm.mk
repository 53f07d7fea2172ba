# tests/vm/vm.mk: the qemu test bed (included by the top Makefile). docs/testing.md explains it.
#
#   make vm-test     boot Debian's stock kernel (the installed linux-headers-amd64's version) under qemu TCG;
#                    for each nvidia-uvm variant in VM_SOFTGPU_VARIANTS load the software GPU (huvm-softgpu.ko,
#                    VM_GPUS pci-testdev devices) and that real nvidia-uvm.ko, run the phases (VM_PHASES):
#                    guest: on patched variants, tests/vm/guest on /dev/nvidia-uvm's huvm ioctls as root and as
#                    uid 65534; softgpu: tests/vm/softgpu; unload; logs in $(VM_OUT)
#   make softgpu-vm  the softgpu phase alone, one variant (VM_SOFTGPU_VARIANTS, default stock-release), for
#                    work on the emulator; VM_GUEST_CMD='dmesg | tail -50' runs that shell command in the
#                    guest after the modules are loaded, instead of pytest
#   make softgpu-vm-modules   build what the softgpu phase loads, and the tests' uvm-binding
#
# Variables: VM_OUT (results), VM_WORK (kernel image cache), VM_PHASES (vm-test: guest,softgpu; one of them
# alone, e.g. VM_PHASES=guest for the guest suite without the long softgpu suite), VM_TIMEOUT (seconds for the
# VM, default 60 + 60 per variant + VM_SOFTGPU_TIMEOUT per variant with the softgpu phase + 420 per patched
# variant with the guest phase), VM_SOFTGPU_TIMEOUT (seconds per variant's softgpu pytest run, default 1500),
# VM_PYTEST_ARGS (extra pytest arguments of the guest suite, one word each, e.g. -k policy),
# VM_SOFTGPU_PYTEST_ARGS (the same for the softgpu phase), VM_SOFTGPU_VARIANTS (nvidia-uvm builds to run, in
# order: a kind, stock-release stock-debug patched-release patched-debug, of the default upstream 535.261.03,
# or <version>-<kind> of another, e.g. 580.142-patched-release, either with -volta appended to run it on emulated
# V100s instead of A100s; default $(VM_DEFAULT_VARIANTS), or every
# kind of both upstreams with VM_MATRIX=full), VM_GPUS (default 4), VM_FB_MIB (framebuffer MiB per GPU, default 128), VM_MEM (guest MiB,
# default 1536 + VM_GPUS * VM_FB_MIB), VM_SMP (vCPUs, default 2), VM_TCG_THREAD (multi: a host thread per
# vCPU, the default; single), VM_STALL_S (the host's stall watchdog, docs/testing.md), VM_MONITOR (qemu's
# monitor socket), VM_APPEND (extra kernel parameters), VM_GUEST_CMD (softgpu-vm: one line of shell).
# Without root, qemu or the headers the targets print "SKIP: vm-test: <reason>" and succeed, unless
# CI=true, where they fail.

# The guest kernel: the ABI the installed linux-headers-amd64 meta package points at (never hard-coded).
# run-vm.sh boots linux-image-$(VM_KVER); the software GPU (driver/softgpu/softgpu.mk) is built against it.
VM_KVER ?= $(shell dpkg-query -W -f='$${Depends}' linux-headers-amd64 2>/dev/null | \
             sed -n 's/^linux-headers-\([^ ,]*\).*/\1/p')
VM_KDIR ?= /lib/modules/$(VM_KVER)/build

VM_RUN  := $(ROOT)/tests/vm/run-vm.sh
VM_WORK ?= $(BUILD)/vm
VM_OUT  ?= $(VM_WORK)/out
VM_PYTEST_ARGS ?=
VM_PHASES ?= guest,softgpu

# Read by run-vm.sh from the environment (only those given).
VM_ENV_VARS := VM_TIMEOUT VM_MEM VM_SMP VM_GPUS VM_FB_MIB VM_SOFTGPU_TIMEOUT VM_SOFTGPU_LONG VM_TCG_THREAD \
               VM_STALL_S VM_MONITOR VM_APPEND
$(foreach v,$(VM_ENV_VARS),$(if $(filter undefined,$(origin $(v))),,$(eval export $(v))))

# The variants' default differs per target; VM_SOFTGPU_VARIANTS (even empty) wins when given.
# A variant is a kind of the default upstream or <version>-<kind> of another (its nvidia-uvm, software GPU
# and UVM binding are built with UPSTREAM=<version>). By default vm-test runs 535's three variants and 580's
# stock and patched release builds; VM_MATRIX=full runs all four kinds of both (docs/testing.md: the budget).
# The emulated GPUs are A100s (GA100, the software GPU's default arch=ampere); a variant named <...>-volta runs
# the same nvidia-uvm on emulated V100s (arch=volta: virtual peer copies, the Volta HAL).
VM_SOFTGPU_KINDS := stock-release stock-debug patched-release patched-debug
VM_OTHER_UPSTREAMS := 580.142
VM_SOFTGPU_ARCH_KNOWN := $(VM_SOFTGPU_KINDS) $(foreach u,$(VM_OTHER_UPSTREAMS),$(addprefix $(u)-,$(VM_SOFTGPU_KINDS)))
VM_SOFTGPU_KNOWN := $(VM_SOFTGPU_ARCH_KNOWN) $(addsuffix -volta,$(VM_SOFTGPU_ARCH_KNOWN))
# The Volta variant of the default is NVIDIA's unmodified release build (the Volta HAL, virtual peer copies: its
# built-ins, the round trips and the peer-copy check: 74 s of VM); the patched one on V100s (294 s of tests) runs
# with VM_MATRIX=full, which keeps a fresh-clone make test inside its 50 minutes (docs/testing.md).
VM_DEFAULT_VARIANTS := stock-release patched-release patched-debug 580.142-stock-release 580.142-patched-release \
                       stock-release-volta
VM_MATRIX ?=
ifeq ($(VM_MATRIX),full)
VM_DEFAULT_VARIANTS := $(VM_SOFTGPU_ARCH_KNOWN) $(addsuffix -volta,$(VM_SOFTGPU_ARCH_KNOWN))
else ifneq ($(VM_MATRIX),)
$(error VM_MATRIX=$(VM_MATRIX): expected full, or nothing for the default variants)
endif
vm_variants = $(if $(filter undefined,$(origin VM_SOFTGPU_VARIANTS)),$(1),$(VM_SOFTGPU_VARIANTS))
VM_TEST_VARIANTS := $(call vm_variants,$(VM_DEFAULT_VARIANTS))
VM_SGVM_VARIANTS := $(call vm_variants,stock-release)
# The upstream of a variant (empty: the default) and its kind (the nvidia-uvm build: without the -volta suffix).
vm_upstream = $(firstword $(foreach u,$(VM_OTHER_UPSTREAMS),$(if $(filter $(u)-%,$(1)),$(u))))
vm_noarch = $(patsubst %-volta,%,$(1))
vm_kind = $(call vm_noarch,$(if $(call vm_upstream,$(1)),$(patsubst $(call vm_upstream,$(1))-%,%,$(1)),$(1)))
vm_upstreams = $(sort $(foreach v,$(1),$(call vm_upstream,$(v))))
# run-vm.sh arguments of the softgpu phase for a list of variants (build/module[-<version>]/<kind>/nvidia-uvm.ko)
vm_softgpu_args = $(if $(1),--softgpu-ko $(SOFTGPU_KO) \
    $(foreach u,$(call vm_upstreams,$(1)),--softgpu-ko-for $(u)=$(BUILD)/softgpu-$(u)/huvm-softgpu.ko) \
    $(foreach v,$(1),--uvm $(v)=$(BUILD)/module$(if $(call vm_upstream,$(v)),-$(call vm_upstream,$(v)))/$(call vm_kind,$(v))/nvidia-uvm.ko))

# The run-vm.sh preflight: a skip (77) ends the target successfully, before anything is built.
vm_preflight = rc=0; bash $(VM_RUN) --preflight --python $(PY) || rc=$$?; if [ $$rc = 77 ]; then exit 0; fi; [ $$rc = 0 ] || exit $$rc
# A make variable as one single-quoted shell word, unexpanded ($ stays $: VM_GUEST_CMD='echo $$HOME' needs none)
vm_shell_word = '$(subst ','"'"',$(value $(1)))'

.PHONY: vm-test softgpu-vm softgpu-vm-modules
vm-test: | venv
	@$(vm_preflight); \
	[ -n "$(VM_TEST_VARIANTS)" ] || { echo "vm-test: VM_SOFTGPU_VARIANTS is empty" >&2; exit 1; }; \
	$(MAKE) --no-print-directory softgpu-vm-modules VM_SOFTGPU_VARIANTS="$(VM_TEST_VARIANTS)"; \
	bash $(VM_RUN) --phases $(VM_PHASES) $(call vm_softgpu_args,$(VM_TEST_VARIANTS)) \
	    --work $(VM_WORK) --out $(VM_OUT) --python $(PY) \
	    $(if $(VM_PYTEST_ARGS),--pytest-args "$(VM_PYTEST_ARGS)") \
	    $(if $(VM_SOFTGPU_PYTEST_ARGS),--softgpu-pytest-args "$(VM_SOFTGPU_PYTEST_ARGS)") || rc=$$?; \
	if [ $$rc = 77 ]; then rc=0; fi; exit $$rc

softgpu-vm: | venv
	@$(vm_preflight); \
	[ -n "$(VM_SGVM_VARIANTS)" ] || { echo "softgpu-vm: VM_SOFTGPU_VARIANTS is empty" >&2; exit 1; }; \
	$(MAKE) --no-print-directory softgpu-vm-modules VM_SOFTGPU_VARIANTS="$(VM_SGVM_VARIANTS)"; \
	bash $(VM_RUN) --phases softgpu $(call vm_softgpu_args,$(VM_SGVM_VARIANTS)) \
	    --work $(VM_WORK) --out $(VM_OUT) --python $(PY) \
	    $(if $(VM_SOFTGPU_PYTEST_ARGS),--softgpu-pytest-args "$(VM_SOFTGPU_PYTEST_ARGS)") \
	    $(if $(value VM_GUEST_CMD),--softgpu-cmd $(call vm_shell_word,VM_GUEST_CMD)) || rc=$$?; \
	if [ $$rc = 77 ]; then rc=0; fi; exit $$rc

# huvm-softgpu.ko, the variants' nvidia-uvm.ko (driver/softgpu/softgpu.mk) and the cffi binding of UVM's
# ioctls that tests/vm/softgpu uses (pyctl.mk's uvm-binding: built on the host, the guest's root is read-only).
softgpu-vm-modules: | venv
	@for v in $(VM_SOFTGPU_VARIANTS); do \
	    case " $(VM_SOFTGPU_KNOWN) " in *" $$v "*) ;; \
	    *) echo "VM_SOFTGPU_VARIANTS: unknown variant '$$v' (known: $(VM_SOFTGPU_KNOWN))" >&2; exit 1 ;; esac; \
	done
	@$(MAKE) --no-print-directory softgpu-module \
	    $(sort $(foreach v,$(VM_SOFTGPU_VARIANTS),$(if $(call vm_upstream,$(v)),,$(HUVM_MODULES)/$(call vm_kind,$(v))/.huvm-built)))
	@$(MAKE) --no-print-directory uvm-binding
	@$(foreach u,$(call vm_upstreams,$(VM_SOFTGPU_VARIANTS)),$(MAKE) --no-print-directory UPSTREAM=$(u) softgpu-module \
	    $(sort $(foreach v,$(filter $(u)-%,$(VM_SOFTGPU_VARIANTS)),$(BUILD)/module-$(u)/$(call vm_kind,$(v))/.huvm-built)) uvm-binding &&) true

test: vm-test
