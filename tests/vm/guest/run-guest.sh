#!/bin/bash
# Runs inside the qemu guest as root (started by tests/vm/init.sh, chrooted into the host's root shared
# read-only over 9p). Loads the test module, runs the guest pytest tree as root, then the unprivileged
# part as uid/gid 65534 with no capabilities, and leaves logs in $HUVM_OUT. Exit status: 0 all passed.
set -u
cd "$HUVM_ROOT"
out=$HUVM_OUT
py=$HUVM_PY
extra=$(cat /tmp/pytest.args 2>/dev/null || true)
rc=0

echo "[t=$(cut -d" " -f1 /proc/uptime)s] == guest kernel: $(uname -r) ($(uname -v)), $(nproc) cpu, $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"
echo "[t=$(cut -d" " -f1 /proc/uptime)s] == python: $py ($("$py" -c 'import sys; print(sys.version.split()[0])'))"

if ! insmod "$HUVM_KO" allow_test=1; then
    echo "== insmod $HUVM_KO failed"
    dmesg > "$out/dmesg.log"
    exit 10
fi
echo "[t=$(cut -d" " -f1 /proc/uptime)s] == module loaded: $(grep '^huvm_ktest ' /proc/modules)"
echo "[t=$(cut -d" " -f1 /proc/uptime)s] == device: $(ls -l /dev/huvm_ktest)"
echo "[t=$(cut -d" " -f1 /proc/uptime)s] == tracepoints: $(ls /sys/kernel/tracing/events/huvm 2>/dev/null | grep -v -e enable -e filter | tr '\n' ' ')"

common=(-c tests/vm/guest/pytest.ini --rootdir=tests/vm/guest -p pytest_timeout)
echo "[t=$(cut -d" " -f1 /proc/uptime)s] == pytest as root (uid $(id -u), CAP_SYS_ADMIN)"
# shellcheck disable=SC2086
"$py" -m pytest "${common[@]}" tests/vm/guest --ignore=tests/vm/guest/unprivileged \
    --junitxml="$out/junit-root.xml" $extra || rc=1

echo "[t=$(cut -d" " -f1 /proc/uptime)s] == pytest as an unprivileged user (uid 65534, gid 65534, no groups, no capabilities)"
# shellcheck disable=SC2086
setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all \
    env HOME=/tmp "$py" -m pytest "${common[@]}" tests/vm/guest/unprivileged \
    --junitxml=/tmp/junit-user.xml $extra || rc=1
cp /tmp/junit-user.xml "$out/junit-user.xml" 2>/dev/null

# A warning, an oops or a bad page leaves a taint bit even when the kernel carried on.
# Allowed: O (4096, out-of-tree module) and E (8192, unsigned module).
taint=$(cat /proc/sys/kernel/tainted)
if [ $((taint & ~(4096 | 8192))) != 0 ]; then
    echo "== kernel tainted: $taint (see dmesg.log)"
    rc=1
fi
dmesg > "$out/dmesg.log"
echo "[t=$(cut -d" " -f1 /proc/uptime)s] == guest done: rc=$rc, taint=$taint"
exit $rc
