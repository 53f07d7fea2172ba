# huvm: simulated node (driver/sim). Included by the top Makefile.
#
#   make sim-test    C tests of the simulator, plain and under ASan/UBSan (part of `make test`)
#   make bench-sim   simulator speed: chunk-touch events/s on one core, one Llama-7B-sized training step on
#                    an 8-GPU node (part of `make bench`)
#   make eval        the evaluation half of the scenario matrix (huvm.sim.matrix): per scenario, harvester
#                    speedup and lender slowdown of huvm and huvm-atc22 against stock, geomean, worst case
#                    (not part of `make test`; EVAL_HALF=tuning for the half the constants were chosen on)
#   make eval-doc    the same, written into docs/policy.md ("Evaluation") between its generated-table markers
#   make replicate-doc  the prototype's Fig 6/8/9 replications (huvm.sim.replicate) into docs/simulator.md
#
# The Python tests (tests/python/test_sim*.py) run with the other Python tests.

SIM_DIR      := $(ROOT)/driver/sim
SIM_BUILD    := $(BUILD)/sim
SIM_SRCS     := $(wildcard $(SIM_DIR)/*.c) $(wildcard $(ROOT)/driver/core/*.c)
SIM_HDRS     := $(wildcard $(SIM_DIR)/*.h) $(wildcard $(ROOT)/driver/core/*.h) \
                $(ROOT)/driver/include/uapi/uvm_huvm_ioctl.h
SIM_CFLAGS   := -std=gnu11 -g -Wall -Wextra -Werror -Wno-unused-function \
                -I$(ROOT)/driver/include/uapi -I$(ROOT)/driver/core -I$(SIM_DIR)
SIM_SAN      := -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all

.PHONY: sim-test bench-sim eval eval-doc replicate-doc

$(SIM_BUILD)/sim_test: $(SIM_DIR)/tests/sim_test.c $(SIM_SRCS) $(SIM_HDRS)
	@mkdir -p $(@D)
	$(CC) $(SIM_CFLAGS) -O2 -o $@ $(SIM_DIR)/tests/sim_test.c $(SIM_SRCS)

$(SIM_BUILD)/sim_test_san: $(SIM_DIR)/tests/sim_test.c $(SIM_SRCS) $(SIM_HDRS)
	@mkdir -p $(@D)
	$(CC) $(SIM_CFLAGS) $(SIM_SAN) -o $@ $(SIM_DIR)/tests/sim_test.c $(SIM_SRCS)

sim-test: $(SIM_BUILD)/sim_test $(SIM_BUILD)/sim_test_san
	$(SIM_BUILD)/sim_test
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		$(SIM_BUILD)/sim_test_san

bench-sim: | venv
	cd $(ROOT) && taskset -c 0 $(PY) -m huvm.sim.bench

EVAL_HALF ?= evaluation
EVAL_OUT  := $(BUILD)/eval

eval: | venv
	@mkdir -p $(EVAL_OUT)
	cd $(ROOT) && $(PY) -m huvm.sim.matrix --half $(EVAL_HALF) -q --json $(EVAL_OUT)/$(EVAL_HALF).json

eval-doc: | venv
	cd $(ROOT) && $(PY) -m huvm.sim.matrix --half evaluation -q --update-doc $(ROOT)/docs/policy.md

test: sim-test
bench: bench-sim

# The prototype's replications (huvm.sim.replicate: the artifact's Fig 6 numbers next to the simulator's, Fig 8
# on Fig 6 case 1, Fig 9 on GPUs 1-2), written into docs/simulator.md between its generated-table markers.
replicate-doc: | venv
	cd $(ROOT) && $(PY) -m huvm.sim.replicate --update-doc $(ROOT)/docs/simulator.md
