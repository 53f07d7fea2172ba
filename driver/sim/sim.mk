# huvm: simulated node (driver/sim). Included by the top Makefile.
#
#   make sim-test    C tests of the simulator, plain and under ASan/UBSan (part of `make test`); its part
#                    sim-thrash-test tests UVM's thrashing detection model alone
#   make bench-sim   simulator speed: chunk-touch events/s on one core, one Llama-7B-sized training step on
#                    an 8-GPU node (part of `make bench`)
#   make eval        the evaluation half of the scenario matrix (huvm.sim.matrix): per scenario, harvester
#                    speedup and lender slowdown of huvm and huvm-atc22 against stock, geomean, worst case;
#                    then per scenario and lender bound T the points compared (huvm's, the prototype's, the best
#                    T-respecting one) and a verdict line (huvm.sim.verdict)
#                    (not part of `make test`; EVAL_HALF=tuning for the half the constants were chosen on)
#   make eval-doc    the same, written into docs/evaluation.md between its generated-table markers; and, per
#                    verdict where huvm is `behind`, the measured difference (huvmlab.sim.verdict.explain) into docs/policy.md
#   make replicate-doc  the prototype's Fig 6/8/9 replications (huvm.sim.replicate) into docs/simulator.md
#   make calibration    the cost model against real measurements: one line per replication row, exit 1 if
#                  a row is off by more than 25 % (huvm.sim.fidelity; not part of `make test`)
#   make calibration-doc  the same table into docs/simulator.md
#
# The Python tests (tests/python/test_sim*.py) run with the other Python tests.

SIM_DIR      := $(ROOT)/driver/sim
SIM_BUILD    := $(BUILD)/sim
# The core's huvm_dispatch_test.c included: the simulator is a test build (its callers may use TEST_* commands).
SIM_SRCS     := $(wildcard $(SIM_DIR)/*.c) $(wildcard $(ROOT)/driver/core/*.c)
SIM_HDRS     := $(wildcard $(SIM_DIR)/*.h) $(wildcard $(ROOT)/driver/core/*.h) \
                $(ROOT)/driver/include/uapi/uvm_huvm_ioctl.h
SIM_CFLAGS   := -std=gnu11 -g -Wall -Wextra -Werror -Wno-unused-function \
                -I$(ROOT)/driver/include/uapi -I$(ROOT)/driver/core -I$(SIM_DIR)
SIM_SAN      := -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all

.PHONY: sim-test bench-sim eval eval-doc replicate-doc calibration calibration-doc

$(SIM_BUILD)/sim_test: $(SIM_DIR)/tests/sim_test.c $(SIM_SRCS) $(SIM_HDRS)
	@mkdir -p $(@D)
	$(CC) $(SIM_CFLAGS) -O2 -o $@ $(SIM_DIR)/tests/sim_test.c $(SIM_SRCS)

$(SIM_BUILD)/sim_test_san: $(SIM_DIR)/tests/sim_test.c $(SIM_SRCS) $(SIM_HDRS)
	@mkdir -p $(@D)
	$(CC) $(SIM_CFLAGS) $(SIM_SAN) -o $@ $(SIM_DIR)/tests/sim_test.c $(SIM_SRCS)

# UVM's thrashing detection model on its own (driver/sim/huvm_sim_thrash.c): `make sim-thrash-test`.
$(SIM_BUILD)/thrash_test: $(SIM_DIR)/tests/thrash_test.c $(SIM_DIR)/huvm_sim_thrash.c $(SIM_DIR)/huvm_sim_thrash.h
	@mkdir -p $(@D)
	$(CC) $(SIM_CFLAGS) -O2 -o $@ $(SIM_DIR)/tests/thrash_test.c $(SIM_DIR)/huvm_sim_thrash.c

$(SIM_BUILD)/thrash_test_san: $(SIM_DIR)/tests/thrash_test.c $(SIM_DIR)/huvm_sim_thrash.c $(SIM_DIR)/huvm_sim_thrash.h
	@mkdir -p $(@D)
	$(CC) $(SIM_CFLAGS) $(SIM_SAN) -o $@ $(SIM_DIR)/tests/thrash_test.c $(SIM_DIR)/huvm_sim_thrash.c

.PHONY: sim-thrash-test
sim-thrash-test: $(SIM_BUILD)/thrash_test $(SIM_BUILD)/thrash_test_san
	$(SIM_BUILD)/thrash_test
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		$(SIM_BUILD)/thrash_test_san

sim-test: $(SIM_BUILD)/sim_test $(SIM_BUILD)/sim_test_san sim-thrash-test
	$(SIM_BUILD)/sim_test
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		$(SIM_BUILD)/sim_test_san

bench-sim: | venv
	cd $(ROOT) && taskset -c 0 $(VENV)/bin/huvmctl sim bench

EVAL_HALF ?= evaluation
EVAL_OUT  := $(BUILD)/eval

# The evaluation runs on the calibrated cost model: how far that model is from real measurements is printed
# first (the full report in $(EVAL_OUT)/calibration.txt); `make calibration` is the check that fails on it.
eval: | venv
	@mkdir -p $(EVAL_OUT)
	@cd $(ROOT) && { $(VENV)/bin/huvmctl sim fidelity > $(EVAL_OUT)/calibration.txt || true; } && \
		tail -n 1 $(EVAL_OUT)/calibration.txt && echo "  (rows: $(EVAL_OUT)/calibration.txt)"
	cd $(ROOT) && $(VENV)/bin/huvmctl sim matrix --half $(EVAL_HALF) -q --json $(EVAL_OUT)/$(EVAL_HALF).json
	cd $(ROOT) && $(VENV)/bin/huvmctl sim verdict --half $(EVAL_HALF)

# The cost model against real measurements (huvm.sim.fidelity): one line per replication row (groups h200,
# fig6, stock), a summary; exits non-zero when a row is off by more than 25 %. Not part of `make test`.
calibration: | venv
	cd $(ROOT) && $(VENV)/bin/huvmctl sim fidelity

calibration-doc: | venv
	cd $(ROOT) && $(VENV)/bin/huvmctl sim fidelity --update-doc $(ROOT)/docs/simulator.md

eval-doc: | venv
	cd $(ROOT) && $(VENV)/bin/huvmctl sim matrix --half evaluation -q --update-doc $(ROOT)/docs/evaluation.md
	cd $(ROOT) && $(VENV)/bin/huvmctl sim verdict --update-doc $(ROOT)/docs/evaluation.md \
		--explain-doc $(ROOT)/docs/policy.md

test: sim-test
bench: bench-sim

# The prototype's replications (huvm.sim.replicate: the artifact's Fig 6 numbers next to the simulator's, Fig 8
# on Fig 6 case 1, Fig 9 on GPUs 1-2), written into docs/simulator.md between its generated-table markers.
replicate-doc: | venv
	cd $(ROOT) && $(VENV)/bin/huvmctl sim replicate --update-doc $(ROOT)/docs/simulator.md
