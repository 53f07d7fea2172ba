#!/bin/bash
# Runs inside the qemu guest as root (started by tests/vm/init.sh, chrooted into the host's root shared
# read-only over 9p) and leaves logs in $HUVM_OUT. Phases ($HUVM_PHASES, comma-separated):
#   ktest    load the test module, run the guest pytest tree as root, then the unprivileged part as
#            uid/gid 65534 with no capabilities;
#   softgpu  check the pci-testdev devices, then for each nvidia-uvm variant ($HUVM_UVM_VARIANTS): load
#            huvm-softgpu.ko and that nvidia-uvm.ko, make /dev/nvidia-uvm{,-tools}, run tests/vm/softgpu,
#            unload both; one line per variant in $HUVM_OUT/softgpu-results.
# Exit status: 0 all passed.
set -u
cd "$HUVM_ROOT"
out=$HUVM_OUT
py=$HUVM_PY
extra=$(cat /tmp/pytest.args 2>/dev/null || true)
phases=" ${HUVM_PHASES:-ktest} "
phases=${phases//,/ }
rc=0
t() { cut -d" " -f1 /proc/uptime; }

echo "[t=$(t)s] == guest kernel: $(uname -r) ($(uname -v)), $(nproc) cpu, $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"
echo "[t=$(t)s] == python: $py ($("$py" -c 'import sys; print(sys.version.split()[0])'))"

# ---- ktest phase --------------------------------------------------------------------------------------
ktest_phase() {
    if ! insmod "$HUVM_KO" allow_test=1; then
        echo "== insmod $HUVM_KO failed"
        rc=10
        return
    fi
    echo "[t=$(t)s] == module loaded: $(grep '^huvm_ktest ' /proc/modules)"
    echo "[t=$(t)s] == device: $(ls -l /dev/huvm_ktest)"
    echo "[t=$(t)s] == tracepoints: $(ls /sys/kernel/tracing/events/huvm 2>/dev/null | grep -v -e enable -e filter | tr '\n' ' ')"

    common=(-c tests/vm/guest/pytest.ini --rootdir=tests/vm/guest -p pytest_timeout)
    echo "[t=$(t)s] == pytest as root (uid $(id -u), CAP_SYS_ADMIN)"
    # shellcheck disable=SC2086
    "$py" -m pytest "${common[@]}" tests/vm/guest --ignore=tests/vm/guest/unprivileged \
        --junitxml="$out/junit-root.xml" $extra || rc=1

    # test commands need CAP_SYS_ADMIN: root builds the node the unprivileged suite reads
    "$py" -c "import sys; sys.path.insert(0, 'tests/vm/guest'); import guestlib; guestlib.build_busy_node()" || rc=1
    echo "[t=$(t)s] == pytest as an unprivileged user (uid 65534, gid 65534, no groups, no capabilities)"
    # shellcheck disable=SC2086
    setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all \
        env HOME=/tmp "$py" -m pytest "${common[@]}" tests/vm/guest/unprivileged \
        --junitxml=/tmp/junit-user.xml $extra || rc=1
    cp /tmp/junit-user.xml "$out/junit-user.xml" 2>/dev/null
    # Unloaded before the softgpu phase: its tracepoints have the names of nvidia-uvm's (huvm:huvm_evict, ...);
    # while it is loaded, tracefs (and so bcc) would name its events, not the patched nvidia-uvm's.
    if ! rmmod huvm_ktest; then
        echo "== rmmod huvm_ktest failed"
        rc=1
    fi
}

# ---- softgpu phase ------------------------------------------------------------------------------------
gpus=${HUVM_SOFTGPU_GPUS:-4}
fb_mib=${HUVM_SOFTGPU_FB_MIB:-128}
sg_extra=$(cat /tmp/softgpu-pytest.args 2>/dev/null || true)
sg_cmd=$out/softgpu-cmd.sh   # debugging (run-vm.sh --softgpu-cmd): runs instead of pytest
results=$out/softgpu-results

loaded() { grep -q "^$1 " /proc/modules; }

# One module parameter as the module sees it: a name the module does not know would be ignored by
# the kernel with a warning only, and the run would quietly use the defaults.
check_param() {  # module param expected
    local got
    got=$(cat "/sys/module/$1/parameters/$2" 2>/dev/null) || { echo "== $1 has no parameter $2"; return 1; }
    [ "$got" = "$3" ] || { echo "== $1: $2=$got, expected $3"; return 1; }
}

softgpu_variant() {  # variant
    local v=$1 ko=$out/nvidia-uvm-$1.ko load=ok tests=skipped unload=ok vrc=0 major log
    local mark="huvm-vm: softgpu variant $v begins" taint0
    taint0=$(cat /proc/sys/kernel/tainted)
    log=$out/dmesg-softgpu-$v.log
    echo "$mark" > /dev/kmsg
    echo "[t=$(t)s] == softgpu [$v]: insmod huvm-softgpu.ko gpus=$gpus fb_mib=$fb_mib; insmod $(basename "$ko")"
    if loaded huvm_softgpu || loaded nvidia_uvm; then
        load="FAIL(modules still loaded from before)"
    elif ! insmod "$HUVM_SOFTGPU_KO" gpus="$gpus" fb_mib="$fb_mib"; then
        load="FAIL(insmod huvm-softgpu)"
    elif ! check_param huvm_softgpu gpus "$gpus" || ! check_param huvm_softgpu fb_mib "$fb_mib"; then
        load="FAIL(huvm-softgpu parameters)"
    elif ! insmod "$ko" uvm_enable_builtin_tests=1 uvm_release_asserts=1; then
        load="FAIL(insmod nvidia-uvm)"
    else
        # UVM registers the chrdev region "nvidia-uvm" but makes no node (uvm.c:uvm_chardev_create):
        # minor 0 is /dev/nvidia-uvm, minor 1 the tools node; mode 0666 like nvidia-modprobe's.
        major=$(awk '$2 == "nvidia-uvm" {print $1}' /proc/devices)
        rm -f /dev/nvidia-uvm /dev/nvidia-uvm-tools
        if [ -z "$major" ] || ! mknod -m 666 /dev/nvidia-uvm c "$major" 0 ||
           ! mknod -m 666 /dev/nvidia-uvm-tools c "$major" 1; then
            load="FAIL(no nvidia-uvm chrdev: '$major')"
        fi
    fi
    [ "$load" = ok ] || { echo "== softgpu [$v]: load $load"; vrc=1; }
    echo "[t=$(t)s] == softgpu [$v]: $(grep -E '^(huvm_softgpu|nvidia_uvm) ' /proc/modules | cut -d' ' -f1-4 | paste -sd';'); $(ls -l /dev/nvidia-uvm /dev/nvidia-uvm-tools 2>/dev/null | awk '{print $1, $5, $6, $NF}' | paste -sd';')"

    local env=(env "HUVM_UVM_VARIANT=$v" "HUVM_SOFTGPU_GPUS=$gpus" "HUVM_SOFTGPU_FB_MIB=$fb_mib"
               "HUVM_UVM_KO=$ko" "HUVM_SOFTGPU_LONG=${HUVM_SOFTGPU_LONG:-}")
    if [ -f "$sg_cmd" ]; then
        # Debugging: run even when a load failed (dmesg is the point then); its status is reported only.
        echo "[t=$(t)s] == softgpu [$v]: guest command"
        "${env[@]}" /bin/bash "$sg_cmd"
        tests="cmd-rc=$?"
    elif [ "$load" = ok ]; then
        echo "[t=$(t)s] == softgpu [$v]: pytest tests/vm/softgpu (timeout ${HUVM_SOFTGPU_TIMEOUT:-900}s)"
        # shellcheck disable=SC2086
        "${env[@]}" timeout -k 15 "${HUVM_SOFTGPU_TIMEOUT:-900}" \
            "$py" -m pytest -c tests/vm/softgpu/pytest.ini --rootdir=tests/vm/softgpu -p pytest_timeout tests/vm/softgpu \
            --junitxml="$out/junit-softgpu-$v.xml" $sg_extra
        local prc=$?
        case $prc in
            0) tests=passed ;;
            124|137) tests="TIMEOUT(${HUVM_SOFTGPU_TIMEOUT:-900}s)"; vrc=1 ;;
            *) tests="FAIL(pytest rc $prc)"; vrc=1 ;;
        esac
    fi

    # Unload: a module that cannot go (references left, a stuck thread) is a failure of this variant.
    if loaded nvidia_uvm && ! rmmod nvidia_uvm; then unload="FAIL(rmmod nvidia_uvm)"; fi
    if [ "$unload" = ok ] && loaded huvm_softgpu && ! rmmod huvm_softgpu; then unload="FAIL(rmmod huvm_softgpu)"; fi
    [ "$unload" = ok ] || { echo "== softgpu [$v]: unload $unload"; vrc=1; }
    rm -f /dev/nvidia-uvm /dev/nvidia-uvm-tools

    dmesg | sed -n "/$mark/,\$p" > "$log"
    local ne na
    ne=$(grep -ci 'not emulated' "$log")
    echo "[t=$(t)s] == softgpu [$v]: dmesg 'not emulated' lines: $ne"
    grep -i 'not emulated' "$log" | sed 's/^/    /'
    # UVM's own asserts (release asserts; all asserts in a debug build). Counted, not failed on: NVIDIA's
    # CHANNEL_SANITY and GPU_SEMAPHORE_SANITY provoke some on purpose (unexpected completed values).
    na=$(grep -c 'nvidia-uvm: .*Assert failed' "$log")
    # A taint bit beyond O+E that this variant added (a warning the kernel survived, a bad page).
    local taint
    taint=$(cat /proc/sys/kernel/tainted)
    if [ $(( (taint & ~taint0) & ~(4096 | 8192) )) != 0 ]; then
        echo "== softgpu [$v]: kernel tainted: $taint (was $taint0; see $(basename "$log"))"
        taint="FAIL($taint)"; vrc=1
    fi
    echo "$v load=$load tests=$tests unload=$unload not_emulated=$ne uvm_asserts=$na taint=$taint" >> "$results"
    echo "[t=$(t)s] == softgpu [$v]: $([ $vrc = 0 ] && echo PASS || echo FAIL): load=$load tests=$tests unload=$unload"
    [ $vrc = 0 ] || [ $rc != 0 ] || rc=1
}

softgpu_phase() {
    local d bdfs=() v variants
    : > "$results"
    # lspci is not there: the pci-testdev devices (1b36:0005) the software GPU binds, one per GPU.
    for d in /sys/bus/pci/devices/*; do
        if [ "$(cat "$d/vendor")" = 0x1b36 ] && [ "$(cat "$d/device")" = 0x0005 ]; then bdfs+=("${d##*/}"); fi
    done
    echo "[t=$(t)s] == softgpu: ${#bdfs[@]} pci-testdev (1b36:0005): ${bdfs[*]}"
    IFS=', ' read -r -a variants <<< "${HUVM_UVM_VARIANTS:-}"
    if [ "${#bdfs[@]}" != "$gpus" ]; then
        echo "== softgpu: expected $gpus pci-testdev devices (one per emulated GPU), found ${#bdfs[@]}"
        for v in "${variants[@]}"; do echo "$v load=FAIL(devices) tests=skipped unload=ok" >> "$results"; done
        [ $rc != 0 ] || rc=1
        return
    fi
    for v in "${variants[@]}"; do softgpu_variant "$v"; done
}

case $phases in *" ktest "*) ktest_phase ;; esac
case $phases in *" softgpu "*) softgpu_phase ;; esac

# A warning, an oops or a bad page leaves a taint bit even when the kernel carried on.
# Allowed: O (4096, out-of-tree module) and E (8192, unsigned module).
taint=$(cat /proc/sys/kernel/tainted)
if [ $((taint & ~(4096 | 8192))) != 0 ]; then
    echo "== kernel tainted: $taint (see dmesg.log)"
    rc=1
fi
dmesg > "$out/dmesg.log"
echo "[t=$(t)s] == guest done: rc=$rc, taint=$taint"
exit $rc
