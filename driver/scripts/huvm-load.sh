#!/usr/bin/env bash
# huvm-load.sh: swap the stock nvidia_uvm for the huvm build and back, on a lab server (root).
#
#   huvm-load.sh load   KO     rmmod the loaded nvidia_uvm, insmod KO $MODULE_PARAMS, verify in sysfs
#   huvm-load.sh unload KO     rmmod the huvm nvidia_uvm, modprobe the stock one back, verify
#   huvm-load.sh status KO     print what is loaded, change nothing
#
# Refuses (exit 2, one line saying why) when:
#   - the build KO is missing or is not a huvm nvidia-uvm.ko for upstream 535.261.03 / this kernel;
#   - nvidia.ko is not loaded, or its version (/sys/module/nvidia/version) is not 535.261.03;
#   - processes hold /dev/nvidia-uvm or /dev/nvidia-uvm-tools (named, from /proc/*/fd), or the module
#     is otherwise in use (/sys/module/nvidia_uvm/refcnt);
#   - unload: no stock nvidia-uvm module is installed to go back to;
#   - load: the kernel requires signed modules (Secure Boot's lockdown, or module.sig_enforce), the build
#     is unsigned, and there is no DKMS signing key to sign it with (else a signed copy is loaded).
# DRY_RUN=1 prints every step instead of doing it (and needs no root). Environment for tests and odd
# systems: SYSFS_ROOT (/sys), PROCFS_ROOT (/proc), STOCK_MODULE (nvidia-uvm: a module name for
# modinfo/modprobe, or a .ko path), KERNEL_RELEASE (uname -r), DKMS_MOK_KEY / DKMS_MOK_CERT
# (/var/lib/dkms/mok.key, mok.pub: the key DKMS signs its modules with), SIGN_FILE (the kernel's sign-file).
set -euo pipefail

VERSION=${UPSTREAM_VERSION:-535.261.03}
SYS=${SYSFS_ROOT:-/sys}
PROC=${PROCFS_ROOT:-/proc}
STOCK=${STOCK_MODULE:-nvidia-uvm}
KREL=${KERNEL_RELEASE:-$(uname -r)}
DRY=${DRY_RUN:-0}
[ "$DRY" = 0 ] || [ "$DRY" = 1 ] || DRY=1
PARAMS=${MODULE_PARAMS:-}
UVM=$SYS/module/nvidia_uvm
MOK_KEY=${DKMS_MOK_KEY:-/var/lib/dkms/mok.key}
MOK_CERT=${DKMS_MOK_CERT:-/var/lib/dkms/mok.pub}

refuse() { echo "huvm-load: refusing: $*" >&2; exit 2; }
die() { echo "huvm-load: $*" >&2; exit 1; }
say() { echo "huvm-load: $*"; }
# run CMD...: do it, or print it under DRY_RUN=1.
run() {
    if [ "$DRY" = 1 ]; then echo "[dry-run] $*"; else echo "+ $*"; "$@"; fi
}

ACTION=${1:-}
KO=${2:-}
case $ACTION in load|unload|status) ;; *) die "usage: huvm-load.sh load|unload|status KO";; esac
[ -n "$KO" ] || die "usage: huvm-load.sh $ACTION KO"

# --- checks --------------------------------------------------------------------------------------
check_build() {
    [ -f "$KO" ] || refuse "no module build at $KO (run: make module)"
    local v hv vm
    hv=$(modinfo -F huvm_version "$KO" 2>/dev/null || true)
    [ -n "$hv" ] || refuse "$KO is not a huvm build (modinfo has no huvm_version)"
    v=$(modinfo -F version "$KO" 2>/dev/null || true)
    [ "$v" = "$VERSION" ] || refuse "$KO is nvidia-uvm $v, expected $VERSION"
    vm=$(modinfo -F vermagic "$KO" 2>/dev/null | awk '{print $1}')
    [ "$vm" = "$KREL" ] || refuse "$KO was built for kernel $vm, the running kernel is $KREL (rebuild: make module KERNEL_OUT=/lib/modules/$KREL/build)"
    KO_SRCVERSION=$(modinfo -F srcversion "$KO" 2>/dev/null || true)
    KO_HUVM=$hv
}

check_nvidia() {
    [ -d "$SYS/module/nvidia" ] || refuse "nvidia.ko is not loaded (load the $VERSION driver first: modprobe nvidia)"
    local v
    v=$(cat "$SYS/module/nvidia/version" 2>/dev/null || echo unknown)
    [ "$v" = "$VERSION" ] || refuse "loaded nvidia.ko is version $v, huvm needs $VERSION"
}

# --- module signatures ---------------------------------------------------------------------------
# Must modules be signed? module.sig_enforce, or lockdown (Debian turns it on under Secure Boot).
sig_required() {
    local e l
    e=$(cat "$SYS/module/module/parameters/sig_enforce" 2>/dev/null || echo N)
    [ "$e" != Y ] || return 0
    l=$(cat "$SYS/kernel/security/lockdown" 2>/dev/null || echo "[none]")
    case $l in *"[none]"*) return 1;; *"["*) return 0;; esac
    return 1
}

# The kernel's sign-file: SIGN_FILE=, the kbuild tree's, or Debian's linux-kbuild-<major.minor>.
find_sign_file() {
    local c mm=${KREL%%-*}
    mm=$(echo "$mm" | cut -d. -f1,2)
    for c in "${SIGN_FILE:-}" "/lib/modules/$KREL/build/scripts/sign-file" "/usr/lib/linux-kbuild-$mm/scripts/sign-file"; do
        [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return 0; }
    done
    return 1
}

# Under Secure Boot an unsigned build is signed with DKMS's key (the one `make dkms-install` signs with and
# the admin enrolled with mokutil) into a copy next to it, which is then loaded; without the key: refused.
prepare_signature() {
    local signer sf
    sig_required || return 0
    signer=$(modinfo -F signer "$KO" 2>/dev/null || true)
    if [ -n "$signer" ]; then say "signed modules required; $KO is signed ($signer)"; return 0; fi
    [ -r "$MOK_KEY" ] && [ -r "$MOK_CERT" ] ||
        refuse "Secure Boot/lockdown requires signed modules and $KO is unsigned, but there is no DKMS key to sign it ($MOK_KEY, $MOK_CERT: run make dkms-install once, which creates it, and enroll it: mokutil --import $MOK_CERT)"
    sf=$(find_sign_file) || refuse "Secure Boot/lockdown requires signed modules and no sign-file was found to sign $KO (install linux-kbuild-$(echo "${KREL%%-*}" | cut -d. -f1,2) or set SIGN_FILE=)"
    SIGNED_KO=${KO%.ko}.signed.ko
    say "signed modules required: signing a copy with the DKMS key ($MOK_CERT)"
    run cp "$KO" "$SIGNED_KO"
    run "$sf" sha512 "$MOK_KEY" "$MOK_CERT" "$SIGNED_KO"
    LOAD_KO=$SIGNED_KO
}

# Processes with /dev/nvidia-uvm (or -tools) open: "pid (comm)" list.
uvm_holders() {
    local fd t pid comm out=()
    for fd in "$PROC"/[0-9]*/fd/*; do
        [ -L "$fd" ] || continue
        t=$(readlink "$fd" 2>/dev/null) || continue
        case $t in /dev/nvidia-uvm|/dev/nvidia-uvm-tools) ;; *) continue;; esac
        pid=${fd#"$PROC"/}; pid=${pid%%/*}
        comm=$(cat "$PROC/$pid/comm" 2>/dev/null || echo '?')
        out+=("$pid ($comm)")
    done
    [ ${#out[@]} = 0 ] || printf '%s\n' "${out[@]}" | sort -un | paste -sd, - | sed 's/,/, /g'
}

check_idle() {
    local h rc
    h=$(uvm_holders)
    [ -z "$h" ] || refuse "/dev/nvidia-uvm is in use by: $h (stop them first)"
    if [ -d "$UVM" ]; then
        rc=$(cat "$UVM/refcnt" 2>/dev/null || echo 0)
        [ "$rc" = 0 ] || refuse "nvidia_uvm is in use (refcnt $rc) although no process has /dev/nvidia-uvm open; check lsmod / nvidia-persistenced"
    fi
}

stock_srcversion() {
    modinfo -k "$KREL" -F srcversion "$STOCK" 2>/dev/null || true
}

loaded_srcversion() {
    cat "$UVM/srcversion" 2>/dev/null || echo unknown
}

describe_loaded() {
    if [ ! -d "$UVM" ]; then echo "nvidia_uvm not loaded"; return; fi
    local s; s=$(loaded_srcversion)
    if [ -n "${KO_SRCVERSION:-}" ] && [ "$s" = "$KO_SRCVERSION" ]; then echo "nvidia_uvm loaded: this huvm build (srcversion $s)"
    elif [ -n "${STOCK_SRC:-}" ] && [ "$s" = "$STOCK_SRC" ]; then echo "nvidia_uvm loaded: stock (srcversion $s)"
    else echo "nvidia_uvm loaded: another build (srcversion $s, version $(cat "$UVM/version" 2>/dev/null || echo '?'))"
    fi
}

verify_plan() {   # verify_plan SRCVERSION PARAMS...
    local want=$1 kv k v got; shift
    if [ "$DRY" = 1 ]; then
        echo "[dry-run] verify $UVM: version = $VERSION, srcversion = $want${*:+, parameters: $*}"
        return 0
    fi
    [ -d "$UVM" ] || die "nvidia_uvm is not loaded after the swap"
    got=$(cat "$UVM/version" 2>/dev/null || echo unknown)
    [ "$got" = "$VERSION" ] || die "loaded nvidia_uvm reports version $got, expected $VERSION"
    got=$(loaded_srcversion)
    [ -z "$want" ] || [ "$got" = "$want" ] || die "loaded nvidia_uvm has srcversion $got, expected $want"
    for kv in "$@"; do
        k=${kv%%=*}; v=${kv#*=}
        [ -r "$UVM/parameters/$k" ] || continue
        got=$(cat "$UVM/parameters/$k")
        # bool parameters read back as Y/N
        case "$got:$v" in Y:1|Y:y|Y:Y|N:0|N:n|N:N) continue;; esac
        [ "$got" = "$v" ] || die "parameter $k is $got after load, asked for $v"
    done
    say "verified: $(describe_loaded)"
}

# --- actions -------------------------------------------------------------------------------------
KO_SRCVERSION=
STOCK_SRC=$(stock_srcversion)

if [ "$ACTION" = status ]; then
    [ -f "$KO" ] && KO_SRCVERSION=$(modinfo -F srcversion "$KO" 2>/dev/null || true)
    if [ -d "$SYS/module/nvidia" ]; then say "nvidia loaded: version $(cat "$SYS/module/nvidia/version" 2>/dev/null || echo '?')"
    else say "nvidia not loaded"; fi
    say "$(describe_loaded)"
    h=$(uvm_holders); say "users of /dev/nvidia-uvm: ${h:-none}"
    exit 0
fi

[ "$DRY" = 1 ] || [ "$(id -u)" = 0 ] || refuse "must run as root (or DRY_RUN=1 to see the plan)"
read -r -a PARAM_ARR <<< "$PARAMS"

if [ "$ACTION" = load ]; then
    LOAD_KO=$KO
    check_build
    check_nvidia
    check_idle
    prepare_signature
    [ -n "$STOCK_SRC" ] || say "warning: no stock '$STOCK' module found for $KREL: make unload will not be able to restore it"
    if [ -d "$UVM" ] && [ "$(loaded_srcversion)" = "$KO_SRCVERSION" ]; then
        say "this huvm build is already loaded (srcversion $KO_SRCVERSION); make unload first to change parameters"
        exit 0
    fi
    say "nvidia $VERSION loaded; $(describe_loaded); no users"
    say "plan: swap in huvm $KO_HUVM from $KO${PARAMS:+ with $PARAMS}"
    [ -d "$UVM" ] && run rmmod nvidia_uvm
    if ! run insmod "$LOAD_KO" "${PARAM_ARR[@]}"; then
        say "insmod failed; restoring the stock module"
        run modprobe "$STOCK" || true
        [ "$LOAD_KO" = "$KO" ] || die "insmod $LOAD_KO failed (see dmesg; \"Key was rejected\": enroll $MOK_CERT with mokutil --import and reboot)"
        die "insmod $KO failed (see dmesg)"
    fi
    verify_plan "$KO_SRCVERSION" "${PARAM_ARR[@]}"
    exit 0
fi

# unload
check_idle
[ -n "$STOCK_SRC" ] || refuse "no stock '$STOCK' module installed for $KREL (modinfo $STOCK failed): nothing to restore"
[ -f "$KO" ] && KO_SRCVERSION=$(modinfo -F srcversion "$KO" 2>/dev/null || true)
if [ -d "$UVM" ] && [ "$(loaded_srcversion)" = "$STOCK_SRC" ]; then
    say "the stock nvidia_uvm is already loaded (srcversion $STOCK_SRC); nothing to do"
    exit 0
fi
say "$(describe_loaded)"
say "plan: restore the stock nvidia_uvm ($STOCK, srcversion $STOCK_SRC)"
[ -d "$UVM" ] && run rmmod nvidia_uvm
run modprobe "$STOCK"
verify_plan "$STOCK_SRC"
