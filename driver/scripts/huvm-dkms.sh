#!/usr/bin/env bash
# huvm-dkms.sh: register nvidia-uvm.ko with huvm as its own DKMS package, so kernel upgrades rebuild it.
#
#   huvm-dkms.sh stage     write the DKMS source tree + dkms.conf into $BUILD/dkms/ (no root needed)
#   huvm-dkms.sh install   stage, copy to /usr/src/huvm-nvidia-uvm-<ver>, dkms add + build + install
#   huvm-dkms.sh remove    dkms remove --all, delete /usr/src/huvm-nvidia-uvm-<ver>
#   huvm-dkms.sh check     stage, then a real `dkms add` + `dkms build` in private trees under $BUILD/dkms
#                          (--dkmstree/--sourcetree): proves the package builds, touches nothing else
#
# The package follows Debian's dkms.conf for nvidia-open-kernel-dkms (same MAKE line, BUILD_EXCLUSIVE_*,
# CLEAN, /updates/dkms), as a separate package "huvm-nvidia-uvm", version <upstream>-huvm<huvm version>,
# that builds only nvidia-uvm.ko. Source tree = upstream + patch series applied (a fresh $BUILD/dkms/work)
# + huvm's driver files copied into huvm/. DRY_RUN=1 prints the root steps instead of running them.
# KERNELVER= picks the kernel (default: the running one, as dkms does).
#
# Surviving upgrades (docs/build.md, "DKMS"):
#   - the module is installed under its own file name, huvm-nvidia-uvm.ko (DEST_MODULE_NAME; the kernel's
#     name stays nvidia_uvm), as Debian installs nvidia-current-open-uvm.ko: no file of NVIDIA's package is
#     replaced, so DKMS needs no --force and a kernel upgrade's autoinstall rebuilds huvm's module as well;
#   - $MODPROBE_DIR/00-huvm-nvidia-uvm.conf (default /etc/modprobe.d) maps `modprobe nvidia-uvm` to it
#     (kmod uses the first `install` rule it reads, files in name order: before Debian's/NVIDIA's nvidia.conf);
#   - BUILD_DEPENDS names NVIDIA's DKMS package (the one registered at this upstream version, or
#     NVIDIA_DKMS_PACKAGE=; none when NVIDIA's driver is not a DKMS package), so autoinstall builds it first;
#   - the build's first step (huvm/dkms-check-nvidia.sh) refuses unless the NVIDIA driver installed for
#     that kernel is exactly this package's upstream version (dkms ignores PRE_BUILD's exit status).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/huvm-paths.sh"
# dkms runs make itself: nothing of the make that called this script may leak into it (under
# `make dkms-check UPSTREAM=580.142` the caller's MAKEFLAGS/MAKELEVEL made dkms' build fail with
# "Unterminated quoted string" in NVIDIA's Makefile; without them it builds).
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES
DRIVER=${DRIVER:-$ROOT/driver}
SRCROOT=${DKMS_SOURCE_ROOT:-/usr/src}
DRY=${DRY_RUN:-0}
[ "$DRY" = 0 ] || DRY=1
NAME=huvm-nvidia-uvm
ABI_H=$DRIVER/include/uapi/uvm_huvm_ioctl.h

die() { echo "huvm-dkms: $*" >&2; exit 1; }
log() { echo "huvm-dkms: $*"; }
run() { if [ "$DRY" = 1 ]; then echo "[dry-run] $*"; else echo "+ $*"; "$@"; fi; }

hv() { sed -n "s/^#define HUVM_VERSION_$1[[:space:]]\+\([0-9]\+\).*/\1/p" "$ABI_H" | head -n 1; }
[ -f "$ABI_H" ] || die "missing $ABI_H"
HUVM_VERSION="$(hv MAJOR).$(hv MINOR).$(hv PATCH)"
[ "$HUVM_VERSION" != ".." ] || die "cannot read HUVM_VERSION_* from $ABI_H"
PKGVER=$VERSION-huvm$HUVM_VERSION
STAGE=$BUILD/dkms/$NAME-$PKGVER
ACTION=${1:-}
MODPROBE_DIR=${MODPROBE_DIR:-/etc/modprobe.d}
MODPROBE_CONF=$MODPROBE_DIR/00-huvm-nvidia-uvm.conf

# NVIDIA's DKMS package at this upstream version (NVIDIA's own packages: "nvidia"; Debian's:
# "nvidia-current-open"), for BUILD_DEPENDS; NVIDIA_DKMS_PACKAGE=none leaves BUILD_DEPENDS out.
nvidia_dkms_package() {
    if [ -n "${NVIDIA_DKMS_PACKAGE:-}" ]; then
        [ "$NVIDIA_DKMS_PACKAGE" = none ] || echo "$NVIDIA_DKMS_PACKAGE"
        return 0
    fi
    command -v dkms >/dev/null || return 0
    dkms status 2>/dev/null | sed -n "s|^\([^/,: ]*\)[/,] *$VERSION[,:].*|\1|p" | grep -vx "$NAME" | head -n 1 || true
}

# The modprobe.d rule: `modprobe nvidia-uvm` (CUDA, nvidia-modprobe, boot) loads huvm's module. kmod runs
# the first `install` command it finds for a name, reading files in name order, so 00- wins over Debian's
# and NVIDIA's nvidia.conf (`install nvidia-uvm modprobe nvidia ; modprobe -i nvidia-current-open-uvm ...`).
write_modprobe_conf() {
    local tmpf
    mkdir -p "$BUILD/dkms"
    tmpf=$(mktemp "$BUILD/dkms/.modprobe.XXXXXX")
    {
        echo "# Written by huvm's \`make dkms-install\` (removed by \`make dkms-remove\`)."
        echo "# nvidia-uvm is huvm's $NAME.ko, DKMS package $NAME $PKGVER (the kernel's"
        echo "# module name stays nvidia_uvm). Sorted before nvidia.conf: modprobe uses the first"
        echo "# install rule it reads for a name."
        echo "install nvidia-uvm /sbin/modprobe nvidia && /sbin/modprobe -i $NAME \$CMDLINE_OPTS"
        [ -z "${MODULE_PARAMS:-}" ] || echo "options $NAME $MODULE_PARAMS"
    } > "$tmpf"
    if [ "$DRY" = 1 ]; then
        echo "[dry-run] write $MODPROBE_CONF:"; sed 's/^/    /' "$tmpf"; rm -f "$tmpf"
    else
        mkdir -p "$MODPROBE_DIR"; chmod 644 "$tmpf"; mv "$tmpf" "$MODPROBE_CONF"; echo "+ wrote $MODPROBE_CONF"
    fi
}

# The package's version check, run as the first step of its build (MAKE[0]).
write_check_script() {
    local out=$1
    {
        echo '#!/bin/sh'
        echo "# First step of $NAME's DKMS build (MAKE[0]): build only next to the NVIDIA driver of exactly"
        echo "# this package's upstream version. A patched nvidia-uvm refuses to load next to another nvidia.ko,"
        echo "# so a stale build after a driver upgrade is refused here, loudly, instead."
        echo "# HUVM_NVIDIA_VERSION= stands in for the installed driver's version (tests: make dkms-check)."
        echo "want=$VERSION"
        cat <<'CHECK'
kver=${1:-$(uname -r)}
have=${HUVM_NVIDIA_VERSION:-}
[ -n "$have" ] || have=$(modinfo -k "$kver" -F version nvidia 2>/dev/null | head -n 1)
if [ -z "$have" ] && [ "$kver" = "$(uname -r)" ]; then have=$(cat /sys/module/nvidia/version 2>/dev/null); fi
if [ -z "$have" ]; then
    echo "huvm-nvidia-uvm: no NVIDIA driver (nvidia.ko) found for kernel $kver: install NVIDIA's $want driver first" >&2
    exit 1
fi
if [ "$have" != "$want" ]; then
    echo "huvm-nvidia-uvm: the installed NVIDIA driver is $have, this package is huvm for $want: not building (build huvm for it: make dkms-install UPSTREAM=$have UPSTREAM_DIR=/usr/src/nvidia-$have)" >&2
    exit 1
fi
echo "huvm-nvidia-uvm: NVIDIA driver $have for kernel $kver, as required"
CHECK
    } > "$out"
    chmod 755 "$out"
}

stage() {
    local tmp f
    mkdir -p "$BUILD/dkms"
    # The package holds upstream + the series as committed (not unsaved edits in build/upstream/work).
    WORK=$BUILD/dkms/work FORCE=1 bash "$HERE/huvm-patch.sh" >/dev/null || die "cannot apply the patch series"
    WORK=$BUILD/dkms/work
    tmp=$(mktemp -d "$BUILD/dkms/.stage.XXXXXX")
    cp -a "$WORK/." "$tmp/"
    rm -rf "$tmp/.huvm-patches"
    mkdir -p "$tmp/huvm/core" "$tmp/huvm/uvm" "$tmp/huvm/include/uapi"
    for f in "$DRIVER"/core/*.[ch] "$DRIVER"/uvm/*.[ch] "$DRIVER"/uvm/*.Kbuild "$DRIVER"/include/uapi/*.h; do
        [ -f "$f" ] && cp "$f" "$tmp/huvm/${f#"$DRIVER"/}"
    done
    cp "$WORK/.huvm-patches/applied" "$tmp/huvm/PATCHES"
    write_check_script "$tmp/huvm/dkms-check-nvidia.sh"
    local dep deps_conf
    dep=$(nvidia_dkms_package)
    if [ -n "$dep" ]; then deps_conf="# Built after NVIDIA's own DKMS package on a kernel upgrade.
BUILD_DEPENDS[0]=\"$dep\""
    else deps_conf="# (No BUILD_DEPENDS: no NVIDIA DKMS package at $VERSION was registered when this was staged.)"; fi
    cat > "$tmp/dkms.conf" <<EOF
# DKMS configuration for nvidia-uvm.ko with huvm.  -*- sh -*-
# Generated by huvm's \`make dkms-install\` from the huvm repository; follows Debian's
# nvidia-open-kernel-dkms dkms.conf, building only nvidia-uvm (upstream $VERSION + huvm $HUVM_VERSION).

PACKAGE_NAME="$NAME"
PACKAGE_VERSION="$PKGVER"

# Only kernels from 3.10 onwards are supported.
BUILD_EXCLUSIVE_KERNEL="^(3\\.[1-9][0-9]|[4-9]\\.)"

# The NVIDIA driver does not support real-time kernels.
BUILD_EXCLUSIVE_CONFIG="!CONFIG_PREEMPT_RT !CONFIG_PREEMPT_RT_FULL"

AUTOINSTALL=yes

$deps_conf

# First the installed driver's version (huvm/dkms-check-nvidia.sh), then nvidia-uvm alone; nvidia.ko's
# symbols (nvUvmInterface*, nvidia_get_rm_ops) are resolved when the module is loaded.
MAKE[0]="sh huvm/dkms-check-nvidia.sh \${kernelver} && env NV_VERBOSE=1 \\
    make \${parallel_jobs+-j\$parallel_jobs} modules KERNEL_UNAME=\${kernelver} \\
    NV_KERNEL_MODULES=nvidia-uvm UVM_BUILD_TYPE=${UVM_BUILD_TYPE:-release} KBUILD_MODPOST_WARN=1"
CLEAN="true"

# Its own file name (the kernel's module name stays nvidia_uvm): NVIDIA's nvidia-uvm.ko is never
# replaced; $MODPROBE_CONF makes modprobe nvidia-uvm load this one.
BUILT_MODULE_NAME[0]="nvidia-uvm"
DEST_MODULE_NAME[0]="$NAME"
DEST_MODULE_LOCATION[0]="/updates/dkms"
EOF
    # Validate: the fields dkms needs, and the tree it will build.
    ( set +u; . "$tmp/dkms.conf"
      [ "$PACKAGE_NAME" = "$NAME" ] && [ "$PACKAGE_VERSION" = "$PKGVER" ] &&
      [ "${BUILT_MODULE_NAME[0]}" = nvidia-uvm ] && [ "${DEST_MODULE_NAME[0]}" = "$NAME" ] &&
      [ "${DEST_MODULE_LOCATION[0]}" = /updates/dkms ] && [ -n "${MAKE[0]}" ] &&
      { [ -z "$dep" ] || [ "${BUILD_DEPENDS[0]}" = "$dep" ]; } ) || die "generated dkms.conf is invalid"
    for f in Kbuild Makefile conftest.sh nvidia-uvm/nvidia-uvm.Kbuild nvidia/nvidia.Kbuild huvm/uvm/huvm.Kbuild \
             huvm/dkms-check-nvidia.sh; do
        [ -f "$tmp/$f" ] || die "DKMS tree lacks $f"
    done
    grep -q 'huvm/uvm/huvm.Kbuild' "$tmp/nvidia-uvm/nvidia-uvm.Kbuild" || die "DKMS tree is not patched (no huvm include in nvidia-uvm.Kbuild)"
    rm -rf "$STAGE"; mv "$tmp" "$STAGE"
    log "staged $NAME $PKGVER in $STAGE ($(find "$STAGE" -type f | wc -l) files)"
}

case $ACTION in
stage)
    stage ;;
install)
    stage
    [ "$DRY" = 1 ] || [ "$(id -u)" = 0 ] || die "must run as root (or DRY_RUN=1 to see the steps)"
    command -v dkms >/dev/null || die "dkms is not installed (apt-get install dkms)"
    kv=${KERNELVER:-$(uname -r)}
    if dkms status -m "$NAME" -v "$PKGVER" 2>/dev/null | grep -q .; then
        run dkms remove -m "$NAME" -v "$PKGVER" --all
    fi
    run rm -rf "$SRCROOT/$NAME-$PKGVER"
    run cp -a "$STAGE" "$SRCROOT/$NAME-$PKGVER"
    run dkms add -m "$NAME" -v "$PKGVER"
    run dkms build -m "$NAME" -v "$PKGVER" -k "$kv"
    # No --force: the module has its own file name, so nothing of NVIDIA's has the same name and version.
    run dkms install -m "$NAME" -v "$PKGVER" -k "$kv"
    write_modprobe_conf
    if [ "$DRY" = 1 ]; then log "dry run: nothing was changed"
    else log "installed $NAME $PKGVER for $kv: /lib/modules/$kv/updates/dkms/$NAME.ko; $MODPROBE_CONF routes modprobe nvidia-uvm to it"; fi ;;
remove)
    [ "$DRY" = 1 ] || [ "$(id -u)" = 0 ] || die "must run as root (or DRY_RUN=1 to see the steps)"
    command -v dkms >/dev/null || die "dkms is not installed"
    found=$(ls -d "$SRCROOT/$NAME-"* 2>/dev/null || true)
    vers=$(dkms status -m "$NAME" 2>/dev/null | sed -n "s|^$NAME/\([^,:]*\).*|\1|p" | sort -u || true)
    [ -n "$vers$found" ] || { log "$NAME is not registered with DKMS; nothing to remove"; exit 0; }
    for v in $vers; do run dkms remove -m "$NAME" -v "$v" --all; done
    for d in $found; do run rm -rf "$d"; done
    [ ! -e "$MODPROBE_CONF" ] || run rm -f "$MODPROBE_CONF" ;;
modprobe-conf)
    # Only the modprobe.d rule (tests: MODPROBE_DIR=<a private folder>).
    write_modprobe_conf ;;
check)
    stage
    command -v dkms >/dev/null || die "dkms is not installed"
    eval "$("$HERE/huvm-kernel.sh")"
    P=$BUILD/dkms/check
    rm -rf "$P"; mkdir -p "$P/src" "$P/tree"
    cp -a "$STAGE" "$P/src/$NAME-$PKGVER"
    dkms add -m "$NAME" -v "$PKGVER" --sourcetree "$P/src" --dkmstree "$P/tree" > "$P/add.log" 2>&1 ||
        { cat "$P/add.log"; die "dkms add failed"; }
    # No NVIDIA driver is installed here: the package's version check must refuse another one (a real
    # dkms build that stops at its first step), then build when told the driver is the right one.
    log "dkms build $NAME $PKGVER for $KVER next to an NVIDIA 0.0.1 driver: must be refused"
    if HUVM_NVIDIA_VERSION=0.0.1 dkms build -m "$NAME" -v "$PKGVER" -k "$KVER" --kernelsourcedir "$KERNEL_OUT" \
            --sourcetree "$P/src" --dkmstree "$P/tree" > "$P/refused.log" 2>&1; then
        die "dkms built $NAME $PKGVER next to an NVIDIA 0.0.1 driver (log: $P/refused.log)"
    fi
    msg=$(grep -rhs "the installed NVIDIA driver is 0.0.1, this package is huvm for $VERSION" "$P/refused.log" "$P/tree" | head -n 1 || true)
    [ -n "$msg" ] || die "dkms build failed without the version check's message (log: $P/refused.log)"
    log "refused as it must be: ${msg%%: not building*}"
    rm -rf "$P/tree/$NAME/$PKGVER/build" "$P/tree/$NAME/$PKGVER/$KVER"
    log "dkms build $NAME $PKGVER for $KVER in $P (private trees)"
    if ! HUVM_NVIDIA_VERSION=$VERSION dkms build -m "$NAME" -v "$PKGVER" -k "$KVER" --kernelsourcedir "$KERNEL_OUT" \
            --sourcetree "$P/src" --dkmstree "$P/tree" > "$P/build.log" 2>&1; then
        tail -n 30 "$P/build.log"; find "$P/tree" -name make.log -exec tail -n 30 {} \;
        die "dkms build failed (log: $P/build.log)"
    fi
    # DKMS keeps the built module under its installed name (DEST_MODULE_NAME).
    ko=$(find "$P/tree/$NAME/$PKGVER/$KVER" -name "$NAME.ko*" | head -n 1)
    [ -n "$ko" ] || die "dkms build produced no $NAME.ko"
    [ "$(modinfo -F name "$ko")" = nvidia_uvm ] || die "$ko is not module nvidia_uvm (modinfo name: $(modinfo -F name "$ko"))"
    log "dkms build OK: $ko (huvm $(modinfo -F huvm_version "$ko"))" ;;
*)
    die "usage: huvm-dkms.sh stage|install|remove|check|modprobe-conf" ;;
esac
