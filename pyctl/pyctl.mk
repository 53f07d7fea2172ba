# pyctl: the Python packages huvm (control plane, huvmctl, exporter) and huvmlab (simulator, traces, experiments).
#
#   make demo      run the shipped consolidation experiment on the simulated node into out/demo
#   make py-test   pytest over tests/python (the TUI's tests run in tui.mk's tui-test)
#   make lint      ruff + mypy --strict over pyctl/huvm, pyctl/huvmlab, tui/huvm_top and tests/python; ruff (same
#                  config) over tests/vm
#   make uvm-binding   huvm.uvm's cffi binding of NVIDIA's UVM ioctls, compiled against the pinned upstream
#                  headers (needs `make source`) into $(UVM_BINDING_DIR); not part of the pip install
#   make gpu-check GPT-2 steps on this machine's GPU with PyTorch's allocator and with huvm's managed pool
#                  (RMM): step times, their ratio, the peak against the trace's prediction; one line and
#                  exit 0 without a GPU. Not part of make test. GPU_CHECK_ARGS="--amp fp32 --batch 4" etc.

.PHONY: py-test lint demo-experiment uvm-binding gpu-check

GPU_CHECK_ARGS ?=

PYTEST_ARGS ?=
DEMO_FILE   ?= $(ROOT)/pyctl/huvm/examples/consolidation.toml
DEMO_OUT    ?= $(ROOT)/out/demo
LINT_CONFIG := $(ROOT)/pyctl/pyproject.toml

py-test: | venv
	@cd $(ROOT) && $(PY) -m pytest -q -p no:cacheprovider tests/python --ignore-glob='tests/python/test_tui*' $(PYTEST_ARGS)

lint: | venv
	@cd $(ROOT) && $(VENV)/bin/ruff check --no-cache --config $(LINT_CONFIG) pyctl/huvm pyctl/huvmlab tui/huvm_top tests/python tests/vm
	@cd $(ROOT) && $(PY) -m mypy --no-incremental --cache-dir=/dev/null --config-file $(LINT_CONFIG) \
		pyctl/huvm pyctl/huvmlab tui/huvm_top
	@cd $(ROOT) && MYPYPATH=pyctl:tui:tests/python:tests $(PY) -m mypy --no-incremental --cache-dir=/dev/null \
		--config-file $(LINT_CONFIG) tests/python

demo-experiment: | venv
	@cd $(ROOT) && $(VENV)/bin/huvmctl experiment run $(DEMO_FILE) --out $(DEMO_OUT)

test: py-test lint
demo: demo-experiment

# huvm.uvm imports the module from here (HUVM_UVM_BINDING overrides); the qemu test bed's softgpu suites
# need it built on the host, since the guest sees the checkout read-only.
# (UPSTREAM=580.142: $(BUILD)/pyuvm-580.142, from that tree's ioctl headers; the test bed's 580 variants use it)
UVM_BINDING_DIR   := $(BUILD)/pyuvm$(HUVM_VSUFFIX)
UVM_BINDING_STAMP := $(UVM_BINDING_DIR)/.huvm-uvm-binding
uvm-binding: $(UVM_BINDING_STAMP)

$(UVM_BINDING_STAMP): $(HUVM_ORIG_STAMP) $(ROOT)/pyctl/huvm/_uvm_build.py | venv
	@rm -rf $(UVM_BINDING_DIR)
	@cd $(ROOT) && $(PY) pyctl/huvm/_uvm_build.py --orig $(HUVM_ORIG) --out $(UVM_BINDING_DIR)
	@touch $@

gpu-check: | venv
	@cd $(ROOT) && $(VENV)/bin/huvmctl gpu-check $(GPU_CHECK_ARGS)
