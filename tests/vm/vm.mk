# tests/vm/vm.mk: the qemu test bed (included by the top Makefile). docs/testing.md explains it.
#
#   make vm-test     boot Debian's stock kernel (the installed linux-headers-amd64's version) under qemu TCG,
#                    load $(KTEST_KO), run tests/vm/guest as root and as uid 65534; logs in $(VM_OUT)
#
# Variables: VM_OUT (results), VM_WORK (kernel image cache), VM_TIMEOUT (seconds, default 240),
# VM_PYTEST_ARGS (extra pytest arguments, one word each, e.g. -k policy), and ktest.mk's KTEST_CORE /
# KTEST_BUILD to test a scratch build of the module. Without root, qemu or the headers the target prints
# "SKIP: vm-test: <reason>" and succeeds, unless CI=true, where it fails.

VM_RUN  := $(ROOT)/tests/vm/run-vm.sh
VM_WORK ?= $(BUILD)/vm
VM_OUT  ?= $(VM_WORK)/out
VM_PYTEST_ARGS ?=

.PHONY: vm-test
vm-test: | venv
	@rc=0; bash $(VM_RUN) --preflight --python $(PY) || rc=$$?; \
	if [ $$rc = 77 ]; then exit 0; fi; [ $$rc = 0 ] || exit $$rc; \
	$(MAKE) --no-print-directory ktest-module; \
	bash $(VM_RUN) --ko $(KTEST_KO) --work $(VM_WORK) --out $(VM_OUT) --python $(PY) \
	    $(if $(VM_PYTEST_ARGS),--pytest-args "$(VM_PYTEST_ARGS)") || rc=$$?; \
	if [ $$rc = 77 ]; then rc=0; fi; exit $$rc

test: vm-test
