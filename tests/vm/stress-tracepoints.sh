#!/bin/bash
# Debugging aid (not run by make test): toggles huvm's trace events through tracefs, as the tests' ftrace
# instances do, while the softgpu suite's oversubscription and peer-tier tests run in a loop beside it, so
# kernel text is patched again and again while the vCPUs fault, evict and schedule. It reproduces the qemu
# TCG hang docs/testing.md describes when ftrace's command-name recording is on:
#
#   make softgpu-vm VM_SOFTGPU_VARIANTS=patched-debug VM_GUEST_CMD="STRESS_RECORD_CMD=1 bash tests/vm/stress-tracepoints.sh"
#
# (hung within 1-220 toggles, the run stopped by run-vm.sh's stall watchdog) and runs clean without it
# (the test bed's default: init.sh turns it off). Runs in the guest as a softgpu-vm guest command, with the
# variant's modules loaded: HUVM_ROOT and HUVM_PY come from the test bed. STRESS_ROUNDS: rounds of the
# background tests (default 40); STRESS_K: their pytest -k expression; STRESS_EVENTS: the event group.
set -u
cd "${HUVM_ROOT:?run inside the test bed}" || exit 1
tracing=/sys/kernel/tracing
events=$tracing/events/${STRESS_EVENTS:-huvm}
[ -d "$events" ] || { echo "stress: no $events (a patched variant is needed)"; exit 1; }
if [ -n "${STRESS_RECORD_CMD:-}" ]; then
    echo 1 > $tracing/options/record-cmd
fi
echo "stress: record-cmd=$(cat $tracing/options/record-cmd) record-tgid=$(cat $tracing/options/record-tgid)"
pytest=("$HUVM_PY" -m pytest -c tests/vm/softgpu/pytest.ini --rootdir=tests/vm/softgpu -p pytest_timeout -q
        -p no:cacheprovider tests/vm/softgpu/test_oversub.py tests/vm/softgpu/test_huvm_scenarios.py
        -k "${STRESS_K:-oversub or evict_to_peer or giveback}")
(
    for i in $(seq 1 "${STRESS_ROUNDS:-40}"); do
        "${pytest[@]}" 2>&1 | tail -1
        echo "stress: background round $i done"
    done
) &
bg=$!
n=0
while kill -0 $bg 2>/dev/null; do
    echo 1 > "$events/enable"
    sleep "0.$((RANDOM % 10))"
    echo 0 > "$events/enable"
    n=$((n + 1))
    [ $((n % 20)) != 0 ] || echo "stress: $n toggles"
done
wait $bg
echo "stress: done, $n toggles"
