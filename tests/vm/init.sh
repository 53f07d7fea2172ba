#!/bin/sh
# /init of the test bed's initramfs (busybox). Mounts the host's root read-only over 9p, the results
# directory read-write at the same path, and runs the guest runner as root in that root. The guest's exit
# code leaves through qemu's isa-debug-exit port (0xf4). Copied by tests/vm/run-vm.sh; not run on the host.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

finish() {
    echo "GUEST_RC=$1"
    # qemu exits with (value << 1) | 1
    printf "\\$(printf %o "$1")" | dd of=/dev/port bs=1 seek=244 count=1 2>/dev/null
    poweroff -f
}

for m in $(cat /modlist); do
    insmod "$m" || { echo "init: insmod $m failed"; finish 90; }
done
R=/newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot $R || {
    echo "init: cannot mount the host root"; finish 91; }
mount -t proc proc $R/proc
mount -t sysfs sysfs $R/sys
mount -t devtmpfs devtmpfs $R/dev
mkdir -p $R/dev/pts $R/dev/shm 2>/dev/null
mount -t devpts devpts $R/dev/pts 2>/dev/null
mount -t tmpfs tmpfs $R/dev/shm
# The checkout may live under a directory the guest covers with a tmpfs (a clone in /tmp, say): keep a
# bind of it from before the tmpfs mounts and put it back on top of them.
repo=$(sed -n 's/^HUVM_ROOT=//p' /guest.env)
case "$repo" in
    /tmp/*|/run/*|/var/tmp/*)
        mkdir -p /checkout && mount --bind "$R$repo" /checkout || {
            echo "init: cannot bind the checkout $repo"; finish 93; } ;;
    *) repo= ;;
esac
for d in tmp run var/tmp; do mount -t tmpfs tmpfs $R/$d; done
chmod 1777 $R/tmp $R/var/tmp
if [ -n "$repo" ]; then
    mkdir -p "$R$repo" && mount --bind /checkout "$R$repo" || {
        echo "init: cannot bind the checkout $repo"; finish 93; }
fi
mount -t debugfs debugfs $R/sys/kernel/debug
mount -t tracefs tracefs $R/sys/kernel/tracing
# No command-name recording: with it, enabling any trace event (huvm's, in a test's ftrace instance too)
# registers ftrace's recorder on the sched_switch and sched_wakeup tracepoints, patching static branches
# inside __schedule() while the other vCPU schedules. Under qemu 7.2's multi-threaded TCG that hung the
# guest within 1 to about 250 enable/disable cycles: vCPUs spinning with interrupts off, one trapping again
# and again on the int3 of the patch site in __schedule() with its run queue locked, the other waiting for
# that lock in load balancing (docs/testing.md). Patching nvidia-uvm's own tracepoints alone did not.
echo 0 > $R/sys/kernel/tracing/options/record-cmd
echo 0 > $R/sys/kernel/tracing/options/record-tgid
# The host's results directory (run-vm.sh --out), read-write, at a fixed path on the tmpfs /run.
mkdir -p $R/run/huvm-out
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 results $R/run/huvm-out || {
    echo "init: cannot mount the results share"; finish 92; }
cp /pytest.args $R/tmp/pytest.args
cp /softgpu-pytest.args $R/tmp/softgpu-pytest.args 2>/dev/null
# Watchdog: shortly before the host's timeout kills qemu, dump every task's stack (sysrq t) and the CPUs'
# (sysrq l) into dmesg-hang.log and exit with 124, so that a hang (a lost GPU completion in the softgpu
# phase waits forever) leaves the kernel's view of it behind. sysrq output goes to dmesg, not the console.
if [ -f /timeout ]; then
    delay=$(( $(cat /timeout) - 25 - $(cut -d. -f1 /proc/uptime) ))
    if [ "$delay" -gt 10 ]; then
        (
            sleep "$delay"
            echo "init: guest watchdog: the VM is about to time out; task stacks in dmesg-hang.log"
            echo l > /proc/sysrq-trigger
            echo t > /proc/sysrq-trigger
            sleep 2
            dmesg > $R/run/huvm-out/dmesg-hang.log
            finish 124
        ) &
    fi
fi
chroot $R /usr/bin/env -i $(cat /guest.env) /bin/bash "$(cat /runner.path)"
finish $?
