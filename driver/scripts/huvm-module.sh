#!/usr/bin/env bash
# huvm-module.sh: build nvidia-uvm.ko (upstream work tree + huvm) in a build tree OUTDIR.
#   huvm-module.sh OUTDIR            build (UVM_BUILD_TYPE from the environment, default release)
#   huvm-module.sh --sparse OUTDIR   run sparse (C=2) over huvm's objects in an already built OUTDIR
#
# OUTDIR is a tree of per-file symlinks: upstream files -> $WORK, huvm/{core,uvm,include/uapi}/* -> the
# repository's driver/ files; objects are written next to the links, so release and debug builds do not
# share objects and the repository stays clean. Kernel: see huvm-kernel.sh (KERNEL_OUT, KERNEL_SRC).
# nvidia.ko's Module.symvers: NVIDIA_SYMVERS=FILE, else found in the usual places, else modpost only
# warns about the nvUvmInterface* symbols (KBUILD_MODPOST_WARN=1).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/huvm-paths.sh"
DRIVER=${DRIVER:-$ROOT/driver}
TYPE=${UVM_BUILD_TYPE:-release}
JOBS=${JOBS:-$(nproc)}

die() { echo "huvm-module: $*" >&2; exit 1; }
log() { echo "huvm-module: $*"; }

SPARSE=0
if [ "${1:-}" = --sparse ]; then SPARSE=1; shift; fi
OUT=${1:?usage: huvm-module.sh [--sparse] OUTDIR}
case $TYPE in release|debug|develop) ;; *) die "UVM_BUILD_TYPE=$TYPE: expected release, debug or develop";; esac
[ -f "$WORK/.huvm-patches/applied" ] || die "no patched upstream tree in $WORK (run: make patch)"

eval "$("$HERE/huvm-kernel.sh")"

# --- the link tree ---------------------------------------------------------------------------------
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# Upstream: a link per file (cp -s); links whose target went away are removed.
(cd "$WORK" && find . -path ./.huvm-patches -prune -o -type f -print) | while read -r f; do
    if [ ! -L "$OUT/$f" ] || [ "$(readlink "$OUT/$f")" != "$WORK/${f#./}" ]; then
        mkdir -p "$OUT/$(dirname "$f")"
        ln -sfn "$WORK/${f#./}" "$OUT/$f"
    fi
done
# huvm: driver/core/*.[ch], driver/uvm/*.{c,h,Kbuild}, driver/include/uapi/*.h
mkdir -p "$OUT/huvm/core" "$OUT/huvm/uvm" "$OUT/huvm/include/uapi"
for pat in "core/*.c" "core/*.h" "uvm/*.c" "uvm/*.h" "uvm/*.Kbuild" "include/uapi/*.h"; do
    for f in $DRIVER/$pat; do
        [ -f "$f" ] || continue
        rel=${f#$DRIVER/}
        [ "$(readlink "$OUT/huvm/$rel" 2>/dev/null)" = "$f" ] || ln -sfn "$f" "$OUT/huvm/$rel"
    done
done
# links into another driver/ (DRIVER= changed) count as gone, like dangling ones
find "$OUT/huvm" -type l ! -lname "$DRIVER/*" -print0 | while IFS= read -r -d '' l; do rm -f "$l"; ln -s /nonexistent "$l"; done
find "$OUT" -xtype l -print0 | while IFS= read -r -d '' l; do
    # a huvm source that was removed: drop the link and its object so modpost does not see it
    rm -f "$l" "${l%.c}.o" "$(dirname "$l")/.$(basename "${l%.c}").o.cmd"
done
[ -f "$OUT/huvm/uvm/huvm.Kbuild" ] || die "driver/uvm/huvm.Kbuild is missing"

# --- kbuild ------------------------------------------------------------------------------------------
ARGS=(NV_KERNEL_MODULES=nvidia-uvm "SYSSRC=$KERNEL_SRC" "SYSOUT=$KERNEL_OUT" "UVM_BUILD_TYPE=$TYPE")
symvers=${NVIDIA_SYMVERS:-}
if [ -z "$symvers" ]; then
    for c in /var/lib/dkms/nvidia*/"$VERSION"/build/Module.symvers \
             /var/lib/dkms/nvidia*/"$VERSION"/"$KVER"/*/Module.symvers \
             /usr/src/nvidia*-"$VERSION"/Module.symvers; do
        if [ -f "$c" ] && grep -q 'nvUvmInterfaceRegisterGpu' "$c"; then symvers=$c; break; fi
    done
fi
if [ -n "$symvers" ]; then
    [ -f "$symvers" ] || die "NVIDIA_SYMVERS=$symvers: no such file"
    ARGS+=("KBUILD_EXTRA_SYMBOLS=$symvers")
    symnote="nvidia.ko symbols from $symvers"
else
    ARGS+=(KBUILD_MODPOST_WARN=1)
    symnote="no nvidia.ko Module.symvers (nvUvmInterface* resolved at load time; set NVIDIA_SYMVERS= to check)"
fi

if [ $SPARSE = 1 ]; then
    command -v sparse >/dev/null || die "sparse is not installed (apt-get install sparse)"
    [ -f "$OUT/nvidia-uvm.ko" ] || die "no build in $OUT (run make module first)"
    objs=$(cd "$OUT" && ls huvm/core/*.c huvm/uvm/uvm_huvm*.c 2>/dev/null | sed 's/\.c$/.o/')
    [ -n "$objs" ] || { log "no huvm sources to check"; exit 0; }
    # The NVIDIA Makefile only knows `modules`; sparse needs kbuild's single-object targets, with the
    # same parameters the NVIDIA Makefile passes.
    log "sparse (C=2) on: $(echo $objs)"
    make -C "$KERNEL_SRC" M="$OUT" KBUILD_OUTPUT="$KERNEL_OUT" ARCH=x86_64 NV_KERNEL_SOURCES="$KERNEL_SRC" \
         NV_KERNEL_OUTPUT="$KERNEL_OUT" NV_SPECTRE_V2=0 "${ARGS[@]}" C=2 CHECK="sparse" \
         $objs > "$OUT/sparse.log" 2>&1 || { tail -n 30 "$OUT/sparse.log"; die "sparse run failed (log: $OUT/sparse.log)"; }
    # Report what sparse (and gcc) said about huvm files; anything there fails the check.
    hits=$(grep -E '(^|/)huvm/[^:]+:[0-9]+:[0-9]+: (warning|error)' "$OUT/sparse.log" | sed "s|$OUT/||" | sort -u || true)
    if [ -n "$hits" ]; then
        echo "$hits"
        die "sparse: $(echo "$hits" | wc -l) finding(s) in huvm files (log: $OUT/sparse.log)"
    fi
    log "sparse: clean for huvm files ($(echo $objs | wc -w) object(s); log: $OUT/sparse.log)"
    exit 0
fi

# The conftest headers depend on the kernel, the Kbuild files and conftest.sh, not on UVM_BUILD_TYPE:
# seed a fresh tree from a sibling build whose inputs are the same (saves ~300 compile tests).
key=$( (cat "$OUT/Kbuild" "$OUT/conftest.sh" "$OUT/nvidia-uvm/nvidia-uvm.Kbuild" "$OUT/nvidia/nvidia.Kbuild" \
        "$OUT/huvm/uvm/huvm.Kbuild" "$KERNEL_OUT/.config" "$KERNEL_OUT/include/generated/utsrelease.h";
        echo "$KERNEL_OUT $KERNEL_SRC") | sha256sum | cut -d' ' -f1)
if [ ! -f "$OUT/conftest/uts_release" ]; then
    for d in "$(dirname "$OUT")"/*/; do
        d=${d%/}
        if [ "$d" != "$OUT" ] && [ -f "$d/conftest/uts_release" ] && [ "$(cat "$d/.huvm-conftest-key" 2>/dev/null)" = "$key" ]; then
            cp -a "$d/conftest" "$OUT/conftest"; log "conftest results copied from $d"; break
        fi
    done
fi
echo "$key" > "$OUT/.huvm-conftest-key"

log "building nvidia-uvm.ko ($TYPE) for $KVER in $OUT; $symnote"
start=$(date +%s)
if ! make -C "$OUT" -j"$JOBS" "${ARGS[@]}" modules > "$OUT/build.log" 2>&1; then
    grep -E ': (fatal )?error:|: undefined reference|\*\*\*' "$OUT/build.log" | sed "s|$OUT/||" | sort -u | head -n 40 || true
    die "build failed (log: $OUT/build.log)"
fi
[ -f "$OUT/nvidia-uvm.ko" ] || die "build finished but $OUT/nvidia-uvm.ko is missing (log: $OUT/build.log)"
# KBUILD_MODPOST_WARN=1 is meant for nvidia.ko's nvUvmInterface* only: any other undefined symbol (a huvm
# function a patch calls but nobody defines, a tracepoint) would only show up at insmod. Fail here.
undef=$(sed -n 's/.*modpost: "\([^"]*\)" \[.*\] undefined!.*/\1/p' "$OUT/build.log" | grep -v '^nvUvmInterface' | sort -u || true)
if [ -n "$undef" ]; then
    rm -f "$OUT/nvidia-uvm.ko"
    die "undefined symbols in nvidia-uvm.ko (not from nvidia.ko): $(echo $undef) (log: $OUT/build.log)"
fi
# Warnings in huvm files are errors already (-Werror); show any others on huvm's behalf too.
grep -E '(^|/)huvm/[^:]+:[0-9]+:[0-9]+: warning' "$OUT/build.log" | sed "s|$OUT/||" || true
log "built $OUT/nvidia-uvm.ko in $(( $(date +%s) - start ))s: $(modinfo -F vermagic "$OUT/nvidia-uvm.ko" | awk '{print $1}'), version $(modinfo -F version "$OUT/nvidia-uvm.ko"), huvm $(modinfo -F huvm_version "$OUT/nvidia-uvm.ko") (ABI $(modinfo -F huvm_abi "$OUT/nvidia-uvm.ko"))"
