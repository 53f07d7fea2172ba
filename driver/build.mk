# driver/build.mk: pinned upstream nvidia-uvm (UPSTREAM=535.261.03 by default, or 580.142) + patch
# series + huvm -> nvidia-uvm.ko; static checks, lab-server load/unload, DKMS. Included by the top
# Makefile; see docs/build.md.
#
# Every target below takes UPSTREAM=<version>: patches/<version>/, driver/scripts/upstream-<version>.*
# and, for a version other than 535.261.03, build/upstream-<version>/ and build/module-<version>/.
#
#   make source            fetch + verify + unpack upstream into $(BUILD)/upstream/orig
#                          (UPSTREAM_DIR=DIR or UPSTREAM_TARBALL=FILE instead of the pinned default)
#   make patch             $(BUILD)/upstream/work = orig + patches/$(UPSTREAM_VERSION)/series
#   make refresh-patches   regenerate the patches from an edited work tree [PATCH=NNNN-x.patch SUBJECT=..]
#   make module            build nvidia-uvm.ko [UVM_BUILD_TYPE=debug] [KERNEL_OUT= KERNEL_SRC=]
#                          [NVIDIA_SYMVERS=.../Module.symvers]
#   make check-kernel      sparse (C=2) over huvm's files in the module build: must be clean
#   make load / unload     swap the stock nvidia_uvm for ours and back (root) [MODULE_PARAMS=..] [DRY_RUN=1]
#   make dkms-install / dkms-remove   register the patched module with DKMS [DRY_RUN=1]
#   make dkms-check        dkms add + build in private trees under $(BUILD)/dkms (no root effects)
#   make module-test       (part of `make test`) per MODULE_TEST_UPSTREAMS (535.261.03 580.142): release
#                          build + check-kernel; debug too for 535 (all with MODULE_TEST_FULL=1)

HUVM_SCRIPTS    := $(ROOT)/driver/scripts
# The default upstream keeps its historical paths; others live beside it (same rule in huvm-paths.sh).
HUVM_VSUFFIX    := $(if $(filter $(HUVM_DEFAULT_UPSTREAM),$(UPSTREAM_VERSION)),,-$(UPSTREAM_VERSION))
HUVM_UPSTREAM   := $(BUILD)/upstream$(HUVM_VSUFFIX)
HUVM_ORIG       := $(HUVM_UPSTREAM)/orig
HUVM_WORK       := $(HUVM_UPSTREAM)/work
# UPSTREAM_PATCHES=<version>: apply another version's series (a 580.x tree given by UPSTREAM_DIR).
HUVM_PATCHDIR   := $(ROOT)/patches/$(or $(UPSTREAM_PATCHES),$(UPSTREAM_VERSION))
HUVM_MODULES    := $(BUILD)/module$(HUVM_VSUFFIX)
UVM_BUILD_TYPE  ?= release
# huvm's files (driver/ of this repository; another checkout's driver/ for experiments)
HUVM_DRIVER     ?= $(ROOT)/driver
HUVM_KO          = $(HUVM_MODULES)/$(UVM_BUILD_TYPE)/nvidia-uvm.ko

# Passed to the scripts through the environment (only those given: an empty FORCE or PATCH must not
# reach kbuild).
HUVM_ENV_VARS := UPSTREAM_DIR UPSTREAM_TARBALL UPSTREAM_PATCHES DEBIAN_MIRROR KERNEL_OUT KERNEL_SRC NVIDIA_SYMVERS \
                 MODULE_PARAMS DRY_RUN FORCE PATCH SUBJECT
$(foreach v,$(HUVM_ENV_VARS),$(if $(filter undefined,$(origin $(v))),,$(eval export $(v))))

.PHONY: source patch module check-kernel load unload dkms-install dkms-remove dkms-check \
        refresh-patches module-test huvm-FORCE

# ---- upstream source and patches ----------------------------------------------------------------
HUVM_ORIG_STAMP := $(HUVM_ORIG)/.huvm-upstream
HUVM_WORK_STAMP := $(HUVM_WORK)/.huvm-patches/applied
HUVM_SERIES     := $(HUVM_PATCHDIR)/series
HUVM_PATCHES    := $(wildcard $(HUVM_PATCHDIR)/*.patch)

source:
	@bash $(HUVM_SCRIPTS)/huvm-source.sh

# Only when missing (make source re-verifies on demand).
$(HUVM_ORIG_STAMP):
	@bash $(HUVM_SCRIPTS)/huvm-source.sh

patch: source
	@bash $(HUVM_SCRIPTS)/huvm-patch.sh

# (wildcard: a version without a series gets huvm-patch.sh's message, not make's "No rule to make target")
$(HUVM_WORK_STAMP): $(HUVM_ORIG_STAMP) $(wildcard $(HUVM_SERIES)) $(HUVM_PATCHES)
	@bash $(HUVM_SCRIPTS)/huvm-patch.sh
	@touch $@

refresh-patches: $(HUVM_WORK_STAMP)
	@bash $(HUVM_SCRIPTS)/huvm-refresh-patches.sh
	@touch $(HUVM_WORK_STAMP)

# ---- module -------------------------------------------------------------------------------------
# Make-level dependencies, so that a second `make module` with nothing changed runs no kbuild at all:
# the work tree's files, huvm's files in driver/, the list of those files (additions and removals)
# and the kernel build tree's identity.
HUVM_DRIVER_FILES := $(sort $(wildcard $(HUVM_DRIVER)/core/*.[ch] $(HUVM_DRIVER)/uvm/*.[ch] \
                       $(HUVM_DRIVER)/uvm/*.Kbuild $(HUVM_DRIVER)/include/uapi/*.h))
HUVM_WORK_FILES    = $(shell find $(HUVM_WORK) -path '*/.huvm-patches' -prune -o -type f -print 2>/dev/null)

$(HUVM_MODULES)/.huvm-files: huvm-FORCE
	@mkdir -p $(@D)
	@echo '$(HUVM_DRIVER_FILES)' | cmp -s - $@ || echo '$(HUVM_DRIVER_FILES)' > $@

$(HUVM_MODULES)/%/.huvm-kernel: huvm-FORCE
	@mkdir -p $(@D)
	@k=$$(bash $(HUVM_SCRIPTS)/huvm-kernel.sh) && eval "$$k" && \
	 id="$$k $$(stat -c %Y $$KERNEL_OUT/include/generated/utsrelease.h $$KERNEL_OUT/.config 2>/dev/null | paste -sd' ') NVIDIA_SYMVERS=$(NVIDIA_SYMVERS)" && \
	 { echo "$$id" | cmp -s - $@ || echo "$$id" > $@; }

# (kept: make would otherwise delete these intermediate stamps and rebuild every time)
.PRECIOUS: $(HUVM_MODULES)/%/.huvm-kernel $(HUVM_MODULES)/%/.huvm-built

$(HUVM_MODULES)/%/.huvm-built: $(HUVM_MODULES)/%/.huvm-kernel $(HUVM_MODULES)/.huvm-files \
                               $(HUVM_WORK_STAMP) $(HUVM_DRIVER_FILES) $(HUVM_WORK_FILES)
	@UVM_BUILD_TYPE=$* DRIVER=$(HUVM_DRIVER) bash $(HUVM_SCRIPTS)/huvm-module.sh $(@D)
	@touch $@

module: $(HUVM_MODULES)/$(UVM_BUILD_TYPE)/.huvm-built
	@echo "nvidia-uvm.ko ($(UVM_BUILD_TYPE)): $(HUVM_KO)"

check-kernel: $(HUVM_MODULES)/release/.huvm-built
	@UVM_BUILD_TYPE=release DRIVER=$(HUVM_DRIVER) bash $(HUVM_SCRIPTS)/huvm-module.sh --sparse $(HUVM_MODULES)/release

# Part of `make test`: for each upstream in MODULE_TEST_UPSTREAMS, the release build and sparse; the
# debug build too for the default upstream, and for every one with MODULE_TEST_FULL=1 (release first:
# debug reuses its conftest results). 580.142 comes from ../shared/upstream/ (see upstream-580.142.source).
MODULE_TEST_UPSTREAMS ?= $(HUVM_DEFAULT_UPSTREAM) 580.142
module-test: | deps
	@for v in $(MODULE_TEST_UPSTREAMS); do \
	    $(MAKE) --no-print-directory module UPSTREAM=$$v UVM_BUILD_TYPE=release || exit 1; \
	    if [ "$$v" = "$(HUVM_DEFAULT_UPSTREAM)" ] || [ -n "$(MODULE_TEST_FULL)" ]; then \
	        $(MAKE) --no-print-directory module UPSTREAM=$$v UVM_BUILD_TYPE=debug || exit 1; fi; \
	    $(MAKE) --no-print-directory check-kernel UPSTREAM=$$v || exit 1; \
	done
	@echo "== module-test: nvidia-uvm.ko built and sparse clean for $(MODULE_TEST_UPSTREAMS) =="

test: module-test

# ---- lab server ---------------------------------------------------------------------------------
load:
	@bash $(HUVM_SCRIPTS)/huvm-load.sh load $(HUVM_KO)

unload:
	@bash $(HUVM_SCRIPTS)/huvm-load.sh unload $(HUVM_KO)

dkms-install: $(HUVM_ORIG_STAMP)
	@DRIVER=$(HUVM_DRIVER) bash $(HUVM_SCRIPTS)/huvm-dkms.sh install

dkms-remove:
	@bash $(HUVM_SCRIPTS)/huvm-dkms.sh remove

# Real `dkms add` + `dkms build` in private trees under $(BUILD)/dkms: no root, nothing installed.
dkms-check: $(HUVM_ORIG_STAMP)
	@DRIVER=$(HUVM_DRIVER) bash $(HUVM_SCRIPTS)/huvm-dkms.sh check
