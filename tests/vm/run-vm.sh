#!/usr/bin/env bash
# huvm qemu test bed: boot Debian's stock kernel (the version of the installed linux-headers-amd64) under
# qemu TCG; for each nvidia-uvm variant (--uvm) load the software GPU (huvm-softgpu.ko, one qemu pci-testdev
# per emulated GPU) and that REAL nvidia-uvm.ko on top of it, run the phases, unload both; then turn the outcome
# into an exit code. The phases:
#   guest    patched variants only: the guest suite (tests/vm/guest) on the patched nvidia-uvm's huvm ioctls
#            (/dev/nvidia-uvm), as root and as an unprivileged user;
#   softgpu  tests/vm/softgpu.
# docs/testing.md describes the design and the timings.
#
# usage: tests/vm/run-vm.sh --softgpu-ko PATH --uvm VARIANT=PATH ... [--phases LIST] [--out DIR] [--work DIR]
#                           [--python PY] [--pytest-args ARGS]
#   --softgpu-ko  huvm-softgpu.ko (a host path; the guest sees host / read-only)
#   --uvm     VARIANT=PATH: an nvidia-uvm.ko of the softgpu phase (linked against huvm-softgpu's symbols);
#             repeat for several, run in the order given (e.g. stock-release=build/module/stock-release/nvidia-uvm.ko).
#             A variant of another upstream than the default is named <version>-<kind> (e.g.
#             580.142-patched-release=build/module-580.142/patched-release/nvidia-uvm.ko) and needs that
#             version's software GPU (--softgpu-ko-for) and UVM binding ($BUILD/pyuvm-<version>)
#   --softgpu-ko-for  VERSION=PATH: the huvm-softgpu.ko built against that upstream's headers
#   --phases  the phases to run, comma-separated: guest, softgpu (default: guest,softgpu)
#   --out     results: console.log, dmesg.log, junit-guest-root-<variant>.xml, junit-guest-user-<variant>.xml,
#             junit-softgpu-<variant>.xml, dmesg-softgpu-<variant>.log, softgpu-results, summary, the .ko files
#             that ran (default $BUILD/vm/out)
#   --work    cache for the kernel image and the initramfs (default $BUILD/vm)
#   --python  the python that runs pytest in the guest (default $PY, the project venv)
#   --pytest-args  extra arguments for the guest suite's pytest runs (e.g. "-k policy")
#   --softgpu-pytest-args  extra arguments for the softgpu phase's pytest runs (e.g. "-k ce_sanity -x")
#   --guest-cmd    debugging: run this shell command in the guest instead of the phases (nothing loaded)
#   --softgpu-cmd  debugging: run this shell command for each variant after the modules are loaded and the
#                  device nodes made, instead of the phases (e.g. 'dmesg | tail')
#   --preflight    only check the prerequisites (exit 0, or 77 / 1 as below) and stop
# env: VM_TIMEOUT (seconds for the whole VM, default 60 + 60 per variant, + VM_SOFTGPU_TIMEOUT per variant with
#      the softgpu phase, + 420 per patched variant with the guest phase),
#      VM_SOFTGPU_LONG (1: the long softgpu suite, e.g. PMM_SANITY's full mode),
#      VM_GPUS (emulated GPUs = pci-testdev devices, default 4), VM_FB_MIB (framebuffer per GPU, default 128),
#      VM_MEM (MiB, default 1536 + VM_GPUS * VM_FB_MIB), VM_SMP (vCPUs, default 2: the emulator's engine
#      thread runs beside UVM's waiters), VM_SOFTGPU_TIMEOUT (seconds per variant's softgpu pytest run, default 1500),
#      CI (when "true", a missing prerequisite is an error instead of a skip), HUVM_KVER (override).
# exit: 0 pass, 1 setup error (or a missing prerequisite under CI=true), 2 guest tests failed, 3 kernel
#       report (oops, warning, lockdep, taint), 4 timeout or crash, 77 skipped (a prerequisite is missing
#       and CI is not "true": the reason is printed as "SKIP: vm-test: ...").
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-$root/build}
out=""; work=""; python=${PY:-$root/.venv/bin/python}; pytest_args=""; guest_cmd=""; preflight=0
softgpu_ko=""; softgpu_kos_for=(); uvms=(); phases=""; softgpu_cmd=""; softgpu_pytest_args=""
while [ $# -gt 0 ]; do
    case "$1" in
        --softgpu-ko) softgpu_ko=$2; shift 2 ;;
        --softgpu-ko-for) softgpu_kos_for+=("$2"); shift 2 ;;
        --uvm) uvms+=("$2"); shift 2 ;;
        --phases) phases=$2; shift 2 ;;
        --softgpu-cmd) softgpu_cmd=$2; shift 2 ;;
        --softgpu-pytest-args) softgpu_pytest_args=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        --python) python=$2; shift 2 ;;
        --pytest-args) pytest_args=$2; shift 2 ;;
        --guest-cmd) guest_cmd=$2; shift 2 ;;
        --preflight) preflight=1; shift ;;
        *) echo "run-vm: unknown argument $1" >&2; exit 1 ;;
    esac
done
work=${work:-$build/vm}
out=${out:-$work/out}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
t_start=$(now)

# A prerequisite is missing: skip with the reason on a developer machine, fail under CI=true.
missing() {
    if [ "${CI:-}" = "true" ]; then
        echo "vm-test: FAIL: $1 (CI=true: the qemu test bed must run)" >&2
        exit 1
    fi
    echo "SKIP: vm-test: $1"
    exit 77
}

[ "$(id -u)" = 0 ] || missing "needs root (qemu's 9p share of / and apt-get download of the kernel image)"
for tool in qemu-system-x86_64 depmod modprobe cpio gzip dpkg-deb apt-get setpriv; do
    command -v "$tool" >/dev/null || missing "$tool not installed (make deps)"
done
busybox=$(command -v busybox || true)
[ -n "$busybox" ] && ! ldd "$busybox" >/dev/null 2>&1 || missing "a static busybox is needed (apt-get install busybox-static)"
[ -x "$python" ] || missing "no python at $python (make venv)"

# The guest kernel is the one the installed headers are for: linux-headers-amd64 depends on exactly one
# linux-headers-<abi>-amd64 (= <package version>); boot linux-image-<abi>-amd64 of that same version.
if [ -z "${HUVM_KVER:-}" ]; then
    HUVM_KVER=$(dpkg-query -W -f='${Depends}' linux-headers-amd64 2>/dev/null |
                sed -n 's/^linux-headers-\([^ ,]*\).*/\1/p' || true)
fi
kver=$HUVM_KVER
[ -n "$kver" ] || missing "linux-headers-amd64 is not installed (make deps)"
kpkgver=$(dpkg-query -W -f='${Version}' "linux-headers-$kver" 2>/dev/null || true)
[ -e "/lib/modules/$kver/build/Makefile" ] || missing "no kernel build tree at /lib/modules/$kver/build"
[ "$preflight" = 0 ] || exit 0

phases=${phases:-guest,softgpu}
phases=${phases//,/ }
has_phase() { case " $phases " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
for p in $phases; do
    case $p in guest|softgpu) ;; *) echo "run-vm: unknown phase '$p' (--phases guest,softgpu)" >&2; exit 1 ;; esac
done
[ -n "${phases// /}" ] || { echo "run-vm: --phases is empty (guest, softgpu)" >&2; exit 1; }
# A module for this kernel, or exit 1.
check_ko() {  # what path hint
    [ -n "$2" ] && [ -f "$2" ] || { echo "run-vm: no $1 at '$2' ($3)" >&2; exit 1; }
    local vm
    vm=$(modinfo -F vermagic "$2" | awk '{print $1}')
    [ "$vm" = "$kver" ] || { echo "run-vm: $2 is built for $vm, not $kver" >&2; exit 1; }
}
gpus=${VM_GPUS:-4}
fb_mib=${VM_FB_MIB:-128}
sg_timeout=${VM_SOFTGPU_TIMEOUT:-1500}
case "$sg_timeout" in [1-9]*) ;; *) echo "run-vm: VM_SOFTGPU_TIMEOUT=$sg_timeout: expected seconds" >&2; exit 1 ;; esac
variants=(); patched=0
check_ko "software GPU module" "$softgpu_ko" "--softgpu-ko: make softgpu-module"
softgpu_ko=$(readlink -f "$softgpu_ko")
[ ${#uvms[@]} -gt 0 ] || { echo "run-vm: at least one --uvm VARIANT=PATH is needed" >&2; exit 1; }
case "$gpus" in [1-9]|[1-9][0-9]) ;; *) echo "run-vm: VM_GPUS=$gpus: expected 1-99" >&2; exit 1 ;; esac
case "$fb_mib" in [1-9]*) ;; *) echo "run-vm: VM_FB_MIB=$fb_mib: expected a number of MiB" >&2; exit 1 ;; esac
declare -A sg_for=()
for s in "${softgpu_kos_for[@]}"; do
    sv=${s%%=*}; sp=${s#*=}
    case "$sv" in ''|*[!0-9.]*|"$s") echo "run-vm: --softgpu-ko-for $s: expected VERSION=PATH" >&2; exit 1 ;; esac
    check_ko "software GPU module for $sv" "$sp" "make softgpu-module UPSTREAM=$sv"
    sg_for[$sv]=$(readlink -f "$sp")
done
for u in "${uvms[@]}"; do
    v=${u%%=*}; p=${u#*=}
    case "$v" in ''|*[!a-z0-9.-]*|"$u") echo "run-vm: --uvm $u: expected VARIANT=PATH" >&2; exit 1 ;; esac
    case "$v" in
        [0-9]*-*) [ -n "${sg_for[${v%%-*}]:-}" ] ||
                      { echo "run-vm: --uvm $v: no --softgpu-ko-for ${v%%-*}=PATH" >&2; exit 1; } ;;
    esac
    check_ko "nvidia-uvm.ko ($v)" "$p" "make uvm-stock-module / uvm-patched-module"
    # Its nvUvmInterface* imports must come from the software GPU (KBUILD_EXTRA_SYMBOLS), not nvidia.ko.
    case ",$(modinfo -F depends "$p")," in
        *,huvm-softgpu,*|*,huvm_softgpu,*) ;;
        *) echo "run-vm: $p ($v) does not depend on huvm-softgpu (built without its Module.symvers?)" >&2; exit 1 ;;
    esac
    variants+=("$v")
    # The guest suite runs once per patched build, on the default (Ampere) variant: a -volta variant only
    # changes the emulated GPUs, which the guest suite does not register.
    case "$v" in *-volta) ;; patched-*|[0-9]*-patched-*) patched=$((patched + 1)) ;; esac
done
if has_phase guest && [ "$patched" = 0 ]; then
    echo "vm-test: note: no patched-* variant, so the guest phase (tests/vm/guest) does not run"
fi

# ---- 1. the kernel: vmlinux (PVH boot, no decompression under TCG) and the virtio/9p modules ----
kdir=$work/kernel-$kver
if [ ! -f "$kdir/ready" ]; then
    echo "vm-test: preparing kernel $kver${kpkgver:+ ($kpkgver)} in $kdir"
    rm -rf "$kdir" "$kdir.tmp"
    mkdir -p "$kdir.tmp"
    chmod 777 "$kdir.tmp"   # apt-get download drops privileges to _apt
    pkg=linux-image-$kver${kpkgver:+=$kpkgver}
    if ! (cd "$kdir.tmp" && apt-get download -q "$pkg" >/dev/null 2>&1); then
        apt-get update -q >/dev/null 2>&1 || true
        (cd "$kdir.tmp" && apt-get download -q "$pkg" >/dev/null) ||
            missing "cannot download $pkg (no network or mirror has moved on)"
    fi
    dpkg-deb -x "$kdir.tmp"/linux-image-*.deb "$kdir.tmp/img"
    depmod -b "$kdir.tmp/img" "$kver"
    # The bzImage payload is xz: cut at the xz magic and decompress (~1 s) into an ELF vmlinux.
    /usr/bin/python3 - "$kdir.tmp/img/boot/vmlinuz-$kver" "$kdir.tmp/vmlinux" <<'PY'
import lzma, sys
data = open(sys.argv[1], "rb").read()
start = data.find(b"\xfd7zXZ\x00")
assert start >= 0, "no xz payload in the kernel image"
elf = lzma.LZMADecompressor().decompress(data[start:])
assert elf[:4] == b"\x7fELF", "payload is not an ELF vmlinux"
open(sys.argv[2], "wb").write(elf)
PY
    mkdir -p "$kdir.tmp/mods"
    : > "$kdir.tmp/modlist"
    modprobe -d "$kdir.tmp/img" -S "$kver" --show-depends -a virtio_pci 9pnet_virtio 9p |
        awk '$1 == "insmod" && !seen[$2]++ { print $2 }' | while read -r m; do
            cp "$m" "$kdir.tmp/mods/"
            echo "/mods/$(basename "$m")" >> "$kdir.tmp/modlist"
        done
    cp "$kdir.tmp/img/boot/config-$kver" "$kdir.tmp/config"
    rm -rf "$kdir.tmp/img" "$kdir.tmp"/*.deb
    touch "$kdir.tmp/ready"
    mv "$kdir.tmp" "$kdir"
fi

# ---- 2. the initramfs: static busybox, the 9p modules, /init and the guest's parameters ----
rm -rf "$out"
mkdir -p "$out"
chmod 755 "$out"
# The guest loads these copies (host paths under /tmp are hidden by the guest's tmpfs).
cp "$softgpu_ko" "$out/huvm-softgpu.ko"
for sv in "${!sg_for[@]}"; do cp "${sg_for[$sv]}" "$out/huvm-softgpu-$sv.ko"; done
for u in "${uvms[@]}"; do cp "${u#*=}" "$out/nvidia-uvm-${u%%=*}.ko"; done
ird=$work/initramfs
rm -rf "$ird"
mkdir -p "$ird"/{bin,dev,proc,sys,newroot,mods}
cp "$busybox" "$ird/bin/busybox"
for applet in $("$busybox" --list); do
    [ "$applet" = busybox ] || ln -s busybox "$ird/bin/$applet"
done
cp "$kdir"/mods/*.ko "$kdir/modlist" "$ird/"
mv "$ird"/*.ko "$ird/mods/"
cp "$here/init.sh" "$ird/init"
chmod 755 "$ird/init"
# The guest environment: env -i keeps exactly these (no spaces in values).
cat > "$ird/guest.env" <<ENV
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
HOME=/root
LANG=C.UTF-8
PYTHONDONTWRITEBYTECODE=1
HUVM_VM_GUEST=1
PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
HUVM_ROOT=$root
HUVM_OUT=/run/huvm-out
HUVM_PY=$python
CI=${CI:-}
HUVM_PHASES=${phases// /,}
HUVM_SOFTGPU_KO=/run/huvm-out/huvm-softgpu.ko
HUVM_BUILD=$build
HUVM_UVM_VARIANTS=$(IFS=,; echo "${variants[*]}")
HUVM_SOFTGPU_GPUS=$gpus
HUVM_SOFTGPU_FB_MIB=$fb_mib
HUVM_SOFTGPU_TIMEOUT=$sg_timeout
HUVM_SOFTGPU_LONG=${VM_SOFTGPU_LONG:-}
ENV
if [ -n "$softgpu_cmd" ]; then
    printf '%s\n' "$softgpu_cmd" > "$out/softgpu-cmd.sh"
fi
if [ -n "$guest_cmd" ]; then
    # Debugging: run this shell command in the guest instead of the test runner.
    printf '%s\n' "$guest_cmd" > "$out/guest-cmd.sh"
    echo /run/huvm-out/guest-cmd.sh > "$ird/runner.path"
else
    echo "$root/tests/vm/guest/run-guest.sh" > "$ird/runner.path"
fi
printf '%s\n' "$pytest_args" > "$ird/pytest.args"
printf '%s\n' "$softgpu_pytest_args" > "$ird/softgpu-pytest.args"

# ---- 3. boot ----
# One pci-testdev (1b36:0005, no Linux driver) per emulated GPU, the pci_dev that
# huvm-softgpu binds and hands to UVM for the DMA API; no vIOMMU (DMA address == guest physical). The
# framebuffers are vmalloc'd guest RAM: VM_MEM leaves 1.5 GiB beside them. slab_nomerge: every slab cache
# counts its own objects (Debian merges caches of equal size), so a module's caches can be counted, and the
# kernel checks each one for objects left when the module destroys it at unload.
devs=()
for _ in $(seq "$gpus"); do devs+=(-device pci-testdev); done
# Each variant's softgpu pytest run is bounded by sg_timeout, so one hang costs that variant only; the guest
# suite (its 24-44 loads of nvidia-uvm included) takes 1-3 minutes per patched variant under TCG.
timeout_s=$((60 + ${#variants[@]} * 60))
if has_phase softgpu; then timeout_s=$((timeout_s + ${#variants[@]} * sg_timeout)); fi
if has_phase guest; then timeout_s=$((timeout_s + patched * 420)); fi
timeout_s=${VM_TIMEOUT:-$timeout_s}
# Two vCPUs, multi-threaded TCG. (The hang three full runs once had here was qemu TCG and the kernel
# patching __schedule(): init.sh turns ftrace's command-name recording off; docs/testing.md.) Slower
# alternatives: VM_SMP=1 (about 5x slower: the tests' waits share the one vCPU with the software GPU's
# engines) and VM_TCG_THREAD=single (one host thread for all vCPUs, 3-4x slower).
mem=${VM_MEM:-$((1536 + gpus * fb_mib))}; smp=${VM_SMP:-2}
tcg_thread=${VM_TCG_THREAD:-multi}
# Debugging knob: VM_APPEND adds kernel parameters (say loglevel=7 softlockup_all_cpu_backtrace=1).
# qemu's monitor listens on a unix socket (VM_MONITOR=<path>, default in the work directory): the stall
# watchdog below reads the vCPUs' registers through it, and `info registers -a` there shows where each
# vCPU is.
mon_sock=${VM_MONITOR:-$work/qemu-monitor.sock}
# A unix socket's path has room for 107 bytes: a deep checkout gets one under /tmp instead.
[ ${#mon_sock} -le 100 ] || mon_sock=$(mktemp -u /tmp/huvm-qemu-monitor.XXXXXX)
rm -f "$mon_sock"
monitor=(-monitor "unix:$mon_sock,server,nowait")
# Stall watchdog (host side): a guest whose vCPUs all spin with interrupts off prints nothing and runs no
# guest watchdog, and one with a vCPU stuck that way only repeats its lockup report until the VM's timeout.
# So when the console has been silent for VM_STALL_S seconds (default: the softgpu pytest timeout + 120 s,
# longer than any test may run silently; 0: off), or when a soft-lockup or RCU-stall report is repeated 60 s
# or more after the first (a stuck vCPU is reported again every half minute; a passing stall under host
# load is not), the vCPUs' registers go to stall-registers.txt and qemu is stopped (verdict: timeout).
stall_s=${VM_STALL_S:-$((sg_timeout + 120))}
echo "$timeout_s" > "$ird/timeout"
(cd "$ird" && find . | cpio -o -H newc --quiet) | gzip -1 > "$work/initramfs.gz"
t_prep=$(now)
echo "vm-test: booting $kver under qemu TCG (thread=$tcg_thread; timeout ${timeout_s}s, $smp vCPU, $mem MiB), phases: $phases"
echo "vm-test:   $softgpu_ko, $gpus GPUs x $fb_mib MiB, nvidia-uvm: ${uvms[*]}"
set +e
rm -f "$work/qemu.rc"
{ timeout --kill-after=5 "$timeout_s" qemu-system-x86_64 \
    -M pc -accel tcg,thread="$tcg_thread" -cpu max -smp "$smp" -m "$mem" \
    -nographic -no-reboot -nic none \
    -device isa-debug-exit,iobase=0xf4,iosize=0x04 \
    "${devs[@]}" "${monitor[@]}" \
    -kernel "$kdir/vmlinux" -initrd "$work/initramfs.gz" \
    -fsdev local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap \
    -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
    -fsdev local,id=results,path="$out",security_model=none,multidevs=remap \
    -device virtio-9p-pci,fsdev=results,mount_tag=results \
    -append "console=ttyS0 loglevel=4 printk.time=1 log_buf_len=4M panic=-1 oops=panic panic_on_warn=1 preempt=full slab_nomerge quiet ${VM_APPEND:-}" \
    < /dev/null 2>&1; echo $? > "$work/qemu.rc"; } | tee "$out/console.log" &
qpipe=$!
stall=""; lockup_at=""; lockups=0
lockup_pat='soft lockup - CPU|rcu_preempt self-detected stall|rcu_preempt detected stalls'
if [ "$stall_s" -gt 0 ]; then
    while kill -0 "$qpipe" 2>/dev/null; do
        sleep 5
        age=$(( $(date +%s) - $(stat -c %Y "$out/console.log" 2>/dev/null || date +%s) ))
        if [ "$age" -ge "$stall_s" ]; then
            stall="the console was silent for ${age}s"
        else
            n=$(grep -acE "$lockup_pat" "$out/console.log" 2>/dev/null)
            if [ "${n:-0}" -gt 0 ] && [ -z "$lockup_at" ]; then
                lockup_at=$(date +%s); lockups=$n
            elif [ -n "$lockup_at" ] && [ "${n:-0}" -gt "$lockups" ] && [ $(( $(date +%s) - lockup_at )) -ge 60 ]; then
                stall="a lockup report repeated after 60s: $(grep -aE -m1 "$lockup_pat" "$out/console.log" | tr -d '\r')"
            fi
        fi
        [ -n "$stall" ] || continue
        python3 - "$mon_sock" > "$out/stall-registers.txt" 2>&1 <<'PY' || true
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.settimeout(5)
s.sendall(b"info registers -a\n")
time.sleep(3)
out = b""
try:
    while True:
        d = s.recv(65536)
        if not d:
            break
        out += d
except OSError:
    pass
sys.stdout.write(out.decode(errors="replace"))
PY
        pkill -f "qemu-system-x86_64 .*unix:$mon_sock,server" || true
        break
    done
fi
wait "$qpipe"
qrc=$(cat "$work/qemu.rc" 2>/dev/null || echo 255)
[ -z "$stall" ] || qrc=124
set -e
t_vm=$(now)

# ---- 4. verdict ----
# isa-debug-exit: qemu exits (guest_rc << 1) | 1. No marker: the kernel panicked (oops=panic,
# panic_on_warn=1) or powered off early. 124/137: timeout.
verdict=0; why="guest tests passed"
if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
    verdict=4; why="timeout: the VM ran past ${timeout_s}s"
    [ -z "$stall" ] || why="stall: $stall; qemu stopped (vCPU registers: stall-registers.txt)"
elif [ $((qrc & 1)) = 1 ]; then
    grc=$((qrc >> 1))
    if [ "$grc" = 124 ]; then
        verdict=4; why="timeout: the guest watchdog fired before ${timeout_s}s (task stacks: dmesg-hang.log)"
    elif [ "$grc" != 0 ]; then
        verdict=2; why="guest tests failed (guest rc $grc)"
    fi
else
    verdict=4; why="the VM ended without a guest exit code (qemu rc $qrc): panic, oops or early poweroff"
fi
# Kernel reports. dmesg.log is written by the guest at the end, dmesg-softgpu-<variant>.log after each
# variant; the console catches what came before a panic. Only kernel lines (printk timestamps) are matched,
# so test names and pytest output cannot trip it. (dmesg-hang.log, the watchdog's task dump, is all call
# traces: not read here.)
kpat='BUG:|WARNING:|Oops|Call Trace|general protection fault|Kernel panic|kmemleak|KASAN|UBSAN|possible circular locking|possible recursive locking|inconsistent lock state|suspicious RCU usage|list_add corruption|list_del corruption|refcount_t:'
reports=$(cat "$out/console.log" "$out/dmesg.log" "$out"/dmesg-softgpu-*.log 2>/dev/null | tr -d '\r' |
          grep -E '^\[ *[0-9]+\.[0-9]+\] ' | grep -E "$kpat" | sort -u || true)
if [ -n "$reports" ]; then
    # One line per distinct message (timestamps dropped), most frequent first; the logs have the rest.
    echo "vm-test: kernel reports ($(echo "$reports" | wc -l) lines; distinct messages, most frequent first):"
    echo "$reports" | sed -E 's/^\[ *[0-9]+\.[0-9]+\] //' | sort | uniq -c | sort -rn | head -n 30 | sed 's/^/    /'
    [ "$verdict" != 0 ] || { verdict=3; why="kernel report in dmesg/console"; }
fi
# What each phase must leave behind (a debugging --guest-cmd runs no phase: its exit code decides).
if [ "$verdict" = 0 ] && [ -z "$guest_cmd" ]; then
    need=(dmesg.log)
    for v in "${variants[@]}"; do
        need+=("dmesg-softgpu-$v.log")
        if [ -z "$softgpu_cmd" ]; then
            if has_phase softgpu; then need+=("junit-softgpu-$v.xml"); fi
            case "$v" in *-volta) ;; patched-*|[0-9]*-patched-*) if has_phase guest; then need+=("junit-guest-root-$v.xml" "junit-guest-user-$v.xml"); fi ;; esac
        fi
        grep -q "^$v " "$out/softgpu-results" 2>/dev/null || { verdict=2; why="guest left no result for variant $v"; }
    done
    for f in "${need[@]}"; do
        [ -s "$out/$f" ] || { verdict=2; why="guest left no $f"; }
    done
fi
if [ -s "$out/softgpu-results" ]; then
    echo "vm-test: per variant:"; sed 's/^/    /' "$out/softgpu-results"
fi
summary=$(printf 'vm-test: %s: %s | prep %ss, vm %ss (boot+tests), total %ss | logs in %s' \
    "$([ "$verdict" = 0 ] && echo PASS || echo FAIL)" "$why" "$(elapsed "$t_start" "$t_prep")" \
    "$(elapsed "$t_prep" "$t_vm")" "$(elapsed "$t_start" "$t_vm")" "$out")
echo "$summary" | tee "$out/summary"
exit "$verdict"
