#!/bin/bash
# Runs inside the qemu guest as root (started by tests/vm/init.sh, chrooted into the host's root shared
# read-only over 9p) and leaves logs in $HUVM_OUT. It checks the pci-testdev devices, then for each nvidia-uvm
# variant ($HUVM_UVM_VARIANTS): loads huvm-softgpu.ko and that nvidia-uvm.ko, makes /dev/nvidia-uvm{,-tools},
# runs the parts named in $HUVM_PHASES (comma-separated), unloads both; one line per variant in
# $HUVM_OUT/softgpu-results. The parts:
#   guest    patched variants only: the guest suite (tests/vm/guest) on the patched nvidia-uvm's huvm ioctls
#            (no GPU registered, so the test commands drive a synthetic node) as root, then the unprivileged
#            part as uid/gid 65534 with no capabilities; nvidia-uvm is then loaded afresh for what follows;
#   softgpu  tests/vm/softgpu.
# Exit status: 0 all passed.
set -u
cd "$HUVM_ROOT"
out=$HUVM_OUT
py=$HUVM_PY
extra=$(cat /tmp/pytest.args 2>/dev/null || true)
phases=" ${HUVM_PHASES:-guest,softgpu} "
phases=${phases//,/ }
rc=0
t() { cut -d" " -f1 /proc/uptime; }

echo "[t=$(t)s] == guest kernel: $(uname -r) ($(uname -v)), $(nproc) cpu, $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"
echo "[t=$(t)s] == python: $py ($("$py" -c 'import sys; print(sys.version.split()[0])'))"

# ---- the variants --------------------------------------------------------------------------------------
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

has_part() { case $phases in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# nvidia-uvm's parameters in every load: its built-in tests (and with them huvm's test commands) on.
uvm_params=(uvm_enable_builtin_tests=1 uvm_release_asserts=1)

# Load nvidia-uvm and make its device nodes; prints "ok" or the failure.
load_uvm() {  # ko
    local major
    if ! insmod "$1" "${uvm_params[@]}"; then echo "FAIL(insmod nvidia-uvm)"; return 1; fi
    # UVM registers the chrdev region "nvidia-uvm" but makes no node (uvm.c:uvm_chardev_create):
    # minor 0 is /dev/nvidia-uvm, minor 1 the tools node; mode 0666 like nvidia-modprobe's.
    major=$(awk '$2 == "nvidia-uvm" {print $1}' /proc/devices)
    rm -f /dev/nvidia-uvm /dev/nvidia-uvm-tools
    if [ -z "$major" ] || ! mknod -m 666 /dev/nvidia-uvm c "$major" 0 ||
       ! mknod -m 666 /dev/nvidia-uvm-tools c "$major" 1; then
        echo "FAIL(no nvidia-uvm chrdev: '$major')"; return 1
    fi
    echo ok
}

# The guest suite on a patched variant's huvm ioctls. Sets guest= (passed or FAIL(...)); leaves nvidia-uvm
# freshly loaded (the suite leaves a synthetic node and reloads the module itself), or sets load=.
guest_suite() {  # variant ko [uvm-binding]
    local v=$1 ko=$2 failed=() common env
    common=(-c tests/vm/guest/pytest.ini --rootdir=tests/vm/guest -p pytest_timeout)
    env=(env HUVM_DEVICE=/dev/nvidia-uvm "HUVM_UVM_VARIANT=$v" "HUVM_UVM_KO=$ko" "HUVM_UVM_PARAMS=${uvm_params[*]}")
    [ -z "${3:-}" ] || env+=("HUVM_UVM_BINDING=$3")
    echo "[t=$(t)s] == guest suite [$v]: tracepoints: $(ls /sys/kernel/tracing/events/huvm 2>/dev/null | grep -v -e enable -e filter | tr '\n' ' ')"
    echo "[t=$(t)s] == guest suite [$v]: pytest as root (uid $(id -u), CAP_SYS_ADMIN)"
    # shellcheck disable=SC2086
    "${env[@]}" "$py" -m pytest "${common[@]}" tests/vm/guest --ignore=tests/vm/guest/unprivileged \
        --junitxml="$out/junit-guest-root-$v.xml" $extra || failed+=(root)

    if loaded nvidia_uvm || load=$(load_uvm "$ko"); then
        # test commands need CAP_SYS_ADMIN: root builds the node the unprivileged suite reads
        "${env[@]}" "$py" -c "import sys; sys.path.insert(0, 'tests/vm/guest'); import guestlib; guestlib.build_busy_node()" ||
            failed+=(busy-node)
        echo "[t=$(t)s] == guest suite [$v]: pytest as an unprivileged user (uid 65534, gid 65534, no groups, no capabilities)"
        # shellcheck disable=SC2086
        setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all \
            "${env[@]}" HOME=/tmp "$py" -m pytest "${common[@]}" tests/vm/guest/unprivileged \
            --junitxml=/tmp/junit-guest-user-$v.xml $extra || failed+=(user)
        cp /tmp/junit-guest-user-$v.xml "$out/junit-guest-user-$v.xml" 2>/dev/null
    else
        failed+=(user)
    fi

    # What follows gets a freshly loaded nvidia-uvm (huvm's state back to its load-time defaults).
    if loaded nvidia_uvm && ! rmmod nvidia_uvm; then
        load="FAIL(rmmod nvidia_uvm after the guest suite)"
    elif [ "$load" = ok ]; then
        load=$(load_uvm "$ko")
    fi
    if [ ${#failed[@]} = 0 ]; then guest=passed; else guest="FAIL($(IFS=,; echo "${failed[*]}"))"; fi
    echo "[t=$(t)s] == guest suite [$v]: $guest"
}

softgpu_variant() {  # variant: <kind> (the default upstream) or <version>-<kind> (run-vm.sh --uvm)
    local v=$1 ko=$out/nvidia-uvm-$1.ko load=ok guest=none tests=skipped unload=ok vrc=0 log
    local mark="huvm-vm: softgpu variant $v begins" taint0
    # The kind (stock-release, patched-debug, ...) and, for another upstream than the default, its version,
    # its software GPU (built against that version's nv_uvm_interface.h) and its UVM binding (that version's
    # ioctl headers).
    # A -volta variant runs the same nvidia-uvm on emulated V100s (huvm-softgpu arch=volta), the others on
    # A100s (arch=ampere, the module's default, named anyway so that the check below sees it).
    local kind=$v up="" sgko=$HUVM_SOFTGPU_KO binding=${HUVM_UVM_BINDING:-} arch=ampere
    case $kind in *-volta) arch=volta; kind=${kind%-volta} ;; esac
    case $kind in [0-9]*-*)
        up=${kind%%-*}; kind=${kind#*-}
        sgko=$out/huvm-softgpu-$up.ko; binding=$HUVM_BUILD/pyuvm-$up ;;
    esac
    # Engines: one thread per GPU (engine_threads=0, GPUs run concurrently, as on a real node) on the default
    # upstream's patched-release A100 variant, where every huvm scenario and built-in then runs with
    # concurrent engines; one thread for all GPUs (engine_threads=1) on the others, whose cross-GPU push
    # chains cost several times more with a thread hand-off under TCG (docs/softgpu.md, "Engines"), to keep
    # `make test` within its budget. test_tlb_engines.py checks the mode the variant loaded.
    local engines=1
    [ "$v" = patched-release ] && engines=0
    taint0=$(cat /proc/sys/kernel/tainted)
    log=$out/dmesg-softgpu-$v.log
    echo "$mark" > /dev/kmsg
    echo "[t=$(t)s] == softgpu [$v]: insmod $(basename "$sgko") gpus=$gpus fb_mib=$fb_mib arch=$arch engine_threads=$engines; insmod $(basename "$ko")"
    if loaded huvm_softgpu || loaded nvidia_uvm; then
        load="FAIL(modules still loaded from before)"
    elif ! insmod "$sgko" gpus="$gpus" fb_mib="$fb_mib" arch="$arch" engine_threads="$engines"; then
        load="FAIL(insmod huvm-softgpu)"
    elif ! check_param huvm_softgpu gpus "$gpus" || ! check_param huvm_softgpu fb_mib "$fb_mib" ||
         ! check_param huvm_softgpu arch "$arch" || ! check_param huvm_softgpu engine_threads "$engines"; then
        load="FAIL(huvm-softgpu parameters)"
    elif ! load=$(load_uvm "$ko"); then
        :
    fi
    [ "$load" = ok ] || { echo "== softgpu [$v]: load $load"; vrc=1; }
    # The upstream nvidia-uvm this variant is (its MODULE_VERSION), for the summary line.
    local upstream
    upstream=$(cat /sys/module/nvidia_uvm/version 2>/dev/null || echo "${up:-?}")
    # The summary names the upstream, the emulated architecture and the kind:
    # "== softgpu [580.142 ampere patched-release]: PASS: ...".
    local label="$upstream $arch $kind"
    echo "[t=$(t)s] == softgpu [$v]: $(grep -E '^(huvm_softgpu|nvidia_uvm) ' /proc/modules | cut -d' ' -f1-4 | paste -sd';'); $(ls -l /dev/nvidia-uvm /dev/nvidia-uvm-tools 2>/dev/null | awk '{print $1, $5, $6, $NF}' | paste -sd';')"

    local env=(env "HUVM_UVM_VARIANT=$kind" "HUVM_UVM_VARIANT_ID=$v" "HUVM_UVM_UPSTREAM=$upstream"
               "HUVM_SOFTGPU_GPUS=$gpus" "HUVM_SOFTGPU_FB_MIB=$fb_mib" "HUVM_SOFTGPU_KO=$sgko"
               "HUVM_UVM_KO=$ko" "HUVM_SOFTGPU_LONG=${HUVM_SOFTGPU_LONG:-}" "HUVM_SOFTGPU_ARCH=$arch"
               "HUVM_SOFTGPU_ENGINE_THREADS=$engines")
    [ -z "$binding" ] || env+=("HUVM_UVM_BINDING=$binding")
    # The guest suite registers no GPU: it runs on the default (Ampere) variant of a build only.
    if [ ! -f "$sg_cmd" ] && [ "$load" = ok ] && has_part guest && [ "$arch" = ampere ]; then
        case $kind in patched-*)
            guest_suite "$v" "$ko" "$binding"
            [ "$load" = ok ] || { echo "== softgpu [$v]: load $load"; vrc=1; }
            case $guest in passed) ;; *) vrc=1 ;; esac ;;
        esac
    fi
    if [ -f "$sg_cmd" ]; then
        # Debugging: run even when a load failed (dmesg is the point then); its status is reported only.
        echo "[t=$(t)s] == softgpu [$v]: guest command"
        "${env[@]}" /bin/bash "$sg_cmd"
        tests="cmd-rc=$?"
    elif [ "$load" = ok ] && has_part softgpu; then
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
    # UVM's own asserts (release asserts; all asserts in a debug build), counted. Only those NVIDIA's
    # CHANNEL_SANITY and GPU_SEMAPHORE_SANITY provoke on purpose are tolerated (tests/vm/softgpu/provoked.py;
    # test_builtin.py checks they come from those tests' own windows): any other fails the variant.
    na=$(grep -c 'nvidia-uvm: .*Assert failed' "$log")
    local unexpected
    if ! unexpected=$("$py" tests/vm/softgpu/provoked.py "$log"); then
        echo "== softgpu [$v]: UVM asserts no built-in test provokes on purpose:"
        printf '%s\n' "$unexpected" | head -20 | sed 's/^/    /'
        na="FAIL($na)"; vrc=1
    fi
    # A taint bit beyond O+E that this variant added (a warning the kernel survived, a bad page).
    local taint
    taint=$(cat /proc/sys/kernel/tainted)
    if [ $(( (taint & ~taint0) & ~(4096 | 8192) )) != 0 ]; then
        echo "== softgpu [$v]: kernel tainted: $taint (was $taint0; see $(basename "$log"))"
        taint="FAIL($taint)"; vrc=1
    fi
    echo "$v upstream=$upstream arch=$arch load=$load guest=$guest tests=$tests unload=$unload not_emulated=$ne uvm_asserts=$na taint=$taint" >> "$results"
    echo "[t=$(t)s] == softgpu [$label]: $([ $vrc = 0 ] && echo PASS || echo FAIL): load=$load guest=$guest tests=$tests unload=$unload"
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
        for v in "${variants[@]}"; do echo "$v load=FAIL(devices) guest=none tests=skipped unload=ok" >> "$results"; done
        [ $rc != 0 ] || rc=1
        return
    fi
    for v in "${variants[@]}"; do softgpu_variant "$v"; done
}

softgpu_phase

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
