# Workload traces (issue 6): `make traces` regenerates the large set into $(BUILD)/traces.
# Included by the top Makefile. Needs the venv with the `traces` extra (torch, transformers).
#
#   make traces                      GPT-2 XL, Llama 7B/13B, BERT-large, ResNet-152 steps + twitter-scale graphs
#   make traces TRACES_ONLY="gpt2-xl bfs-twitter"     a subset
#   make traces-bundled              regenerate the small traces shipped in pyctl/huvm/data/traces

TRACES_DIR  ?= $(BUILD)/traces
TRACES_ONLY ?=

.PHONY: traces traces-bundled traces-test

traces: | venv
	@mkdir -p $(TRACES_DIR)
	$(VENV)/bin/huvmctl trace large $(TRACES_DIR) --no-progress $(if $(TRACES_ONLY),--only $(TRACES_ONLY))

traces-bundled: | venv
	$(VENV)/bin/huvmctl trace bundled $(ROOT)/pyctl/huvm/data/traces --no-progress

traces-test: | venv
	$(PY) -m pytest -q -p no:cacheprovider $(ROOT)/tests/python/test_traces.py $(ROOT)/tests/python/test_traces_dnn.py
