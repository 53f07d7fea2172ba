# huvm: peer-GPU eviction tier for nvidia-uvm 535.261.03.
#
#   make demo      set everything up and run the example experiment on the simulated node
#   make test      every test suite: C core, Python, module build, static checks, qemu test bed
#
# Each area keeps its rules in its own fragment (included below); this file holds the shared
# variables, the Python environment and the umbrella targets.

SHELL       := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
ROOT        := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
BUILD       ?= $(ROOT)/build
VENV        ?= $(ROOT)/.venv
PY          := $(VENV)/bin/python
# The venv is made from Debian's python so that bcc (python3-bpfcc) is importable.
SYSTEM_PY   ?= /usr/bin/python3
# The upstream nvidia-uvm to patch: UPSTREAM=535.261.03 (default) or 580.142 (docs/build.md).
HUVM_DEFAULT_UPSTREAM := 535.261.03
UPSTREAM    ?= $(HUVM_DEFAULT_UPSTREAM)
UPSTREAM_VERSION := $(UPSTREAM)
export ROOT BUILD VENV PY UPSTREAM_VERSION

.PHONY: all help deps venv test demo bench lint
.DEFAULT_GOAL := help

help:
	@echo "huvm targets (upstream nvidia-uvm $(UPSTREAM_VERSION); UPSTREAM=580.142 for the 580 branch):"
	@echo "  demo           set up and run the example consolidation experiment (simulated node)"
	@echo "  test           all tests (C core, Python, module build, sparse, qemu test bed)"
	@echo "  source patch module check-kernel load unload dkms-install dkms-remove refresh-patches"
	@echo "  vm-test bench eval traces lint format"

# System packages (Debian); a no-op when everything is present.
deps:
	@bash $(ROOT)/driver/scripts/install-deps.sh

# The project's Python environment: Debian python + system site packages (bcc), our packages editable.
VENV_STAMP := $(VENV)/.huvm-installed
venv: $(VENV_STAMP)
# The cffi binding (pyctl/huvm/_build.py) compiles the ABI headers: a changed header rebuilds it.
$(VENV_STAMP): pyctl/pyproject.toml tui/pyproject.toml $(wildcard pyctl/huvm/_build.py) \
               driver/include/uapi/uvm_huvm_ioctl.h driver/include/uapi/huvm_softgpu_ioctl.h driver/core/huvm_core.h | deps
	@[ -x $(PY) ] || $(SYSTEM_PY) -m venv --system-site-packages $(VENV)
	@$(PY) -m pip install -q --upgrade pip "setuptools>=77"
	@$(PY) -m pip install -q torch==2.13.0
	@$(PY) -m pip install -q -e "$(ROOT)/pyctl[dev,traces]" -e "$(ROOT)/tui[dev]"
	@touch $@

include $(ROOT)/driver/build.mk
include $(ROOT)/driver/core/core.mk
include $(ROOT)/driver/sim/sim.mk
include $(ROOT)/driver/softgpu/softgpu.mk
include $(ROOT)/pyctl/pyctl.mk
include $(ROOT)/pyctl/traces.mk
include $(ROOT)/tui/tui.mk
include $(ROOT)/tests/vm/vm.mk

# C style of driver/ (driver/.clang-format, NVIDIA UVM's kernel style): `make format` applies it, `make lint`
# fails on any difference (clang-format is pinned in pyctl's dev extras, so every machine formats alike).
C_FORMAT_SRCS = $(shell find $(ROOT)/driver -name '*.[ch]' | sort)
.PHONY: format lint-c
format: | venv
	@$(VENV)/bin/clang-format -i $(C_FORMAT_SRCS)
lint-c: | venv
	@$(VENV)/bin/clang-format --dry-run --Werror $(C_FORMAT_SRCS)
lint: lint-c

# Umbrella targets; the fragments add their parts as prerequisites of these.
test: | venv
	@echo "== all test suites passed =="

bench: | venv

demo: | venv
