#!/usr/bin/env bash
# huvm-module.sh: build nvidia-uvm.ko (upstream work tree + huvm) in a build tree OUTDIR.
#   huvm-module.sh OUTDIR            build (UVM_BUILD_TYPE from the environment, default release)
#   huvm-module.sh --sparse OUTDIR   run sparse (C=2) over huvm's objects in an already built OUTDIR
#   huvm-module.sh --stock OUTDIR    build NVIDIA's UNPATCHED nvidia-uvm.ko from $ORIG instead (no huvm
#                                    files, no patches): the qemu test bed's baseline, linked against the
#                                    software GPU's Module.symvers (NVIDIA_SYMVERS=); see docs/testing.md
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

SPARSE=0; STOCK=0
case "${1:-}" in
    --sparse) SPARSE=1; shift ;;
    --stock) STOCK=1; shift ;;
esac
OUT=${1:?usage: huvm-module.sh [--sparse|--stock] OUTDIR}
case $TYPE in release|debug|develop) ;; *) die "UVM_BUILD_TYPE=$TYPE: expected release, debug or develop";; esac
if [ $STOCK = 1 ]; then
    # The source of the link tree: the pristine upstream tree and its own stamp file.
    SRC=$ORIG; SRC_SKIP=./.huvm-upstream
    [ -f "$ORIG/.huvm-upstream" ] || die "no upstream tree in $ORIG (run: make source)"
else
    SRC=$WORK; SRC_SKIP=./.huvm-patches
    [ -f "$WORK/.huvm-patches/applied" ] || die "no patched upstream tree in $WORK (run: make patch)"
fi

eval "$("$HERE/huvm-kernel.sh")"

# --- the link tree ---------------------------------------------------------------------------------
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# Upstream: a link per file (cp -s); links whose target went away are removed.
(cd "$SRC" && find . -path "$SRC_SKIP" -prune -o -type f -print) | while read -r f; do
    if [ ! -L "$OUT/$f" ] || [ "$(readlink "$OUT/$f")" != "$SRC/${f#./}" ]; then
        mkdir -p "$OUT/$(dirname "$f")"
        ln -sfn "$SRC/${f#./}" "$OUT/$f"
    fi
done
if [ $STOCK = 1 ]; then
    # Nothing of huvm's: a tree that had huvm links (an OUTDIR reused) loses them and their objects.
    [ ! -e "$OUT/huvm" ] || { log "removing huvm files from the stock tree $OUT"; rm -rf "$OUT/huvm"; }
    find "$OUT" -xtype l -print0 | while IFS= read -r -d '' l; do rm -f "$l" "${l%.c}.o"; done
else
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
fi

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
if [ $STOCK = 1 ]; then
    # nvidia-uvm.ko alone (NV_KERNEL_MODULES=nvidia-uvm) would leave out the conftests that only
    # nvidia/nvidia.Kbuild registers, though UVM and common/inc test their macros; NVIDIA builds the two
    # together. Register the same list, as the patched tree's huvm.Kbuild does, but through the
    # environment: kbuild's `NV_CONFTEST_*_COMPILE_TESTS += ...` appends to an inherited variable, so the
    # upstream files stay untouched and the conftest headers equal those of a combined build.
    while read -r var test; do
        export "$var=${!var:-} $test"
    done < <(sed -n 's/^[[:space:]]*\(NV_CONFTEST_[A-Z]*_COMPILE_TESTS\)[[:space:]]*+=[[:space:]]*\([A-Za-z0-9_]*\).*/\1 \2/p' \
             "$OUT/nvidia/nvidia.Kbuild")
    symnote="$symnote; UNPATCHED upstream ($ORIG)"
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
kbuilds=("$OUT/Kbuild" "$OUT/conftest.sh" "$OUT/nvidia-uvm/nvidia-uvm.Kbuild" "$OUT/nvidia/nvidia.Kbuild")
[ $STOCK = 1 ] || kbuilds+=("$OUT/huvm/uvm/huvm.Kbuild")
key=$( (cat "${kbuilds[@]}" "$KERNEL_OUT/.config" "$KERNEL_OUT/include/generated/utsrelease.h";
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

# kbuild reruns modpost when an object changed, not when KBUILD_EXTRA_SYMBOLS did: a new CRC or export in
# that file would leave nvidia-uvm.ko with stale symbol versions (insmod: "disagrees about version of
# symbol"). Drop modpost's output when the file's content changed since the last build.
symkey=$( (echo "$symvers"; [ -z "$symvers" ] || cat "$symvers") | sha256sum | cut -d' ' -f1)
if [ "$(cat "$OUT/.huvm-extra-symbols" 2>/dev/null)" != "$symkey" ]; then
    rm -f "$OUT/Module.symvers" "$OUT/nvidia-uvm.mod.c"
fi

log "building nvidia-uvm.ko ($TYPE) for $KVER in $OUT; $symnote"
start=$(date +%s)
if ! make -C "$OUT" -j"$JOBS" "${ARGS[@]}" modules > "$OUT/build.log" 2>&1; then
    grep -E ': (fatal )?error:|: undefined reference|\*\*\*' "$OUT/build.log" | sed "s|$OUT/||" | sort -u | head -n 40 || true
    die "build failed (log: $OUT/build.log)"
fi
[ -f "$OUT/nvidia-uvm.ko" ] || die "build finished but $OUT/nvidia-uvm.ko is missing (log: $OUT/build.log)"
# KBUILD_MODPOST_WARN=1 is meant for nvidia.ko's symbols only (nvUvmInterface*, and nvidia_get_rm_ops for huvm's version check): any other undefined symbol (a huvm
# function a patch calls but nobody defines, a tracepoint) would only show up at insmod. Fail here.
undef=$(sed -n 's/.*modpost: "\([^"]*\)" \[.*\] undefined!.*/\1/p' "$OUT/build.log" |
        grep -v -e '^nvUvmInterface' -e '^nvidia_get_rm_ops$' | sort -u || true)
if [ -n "$undef" ]; then
    rm -f "$OUT/nvidia-uvm.ko"
    die "undefined symbols in nvidia-uvm.ko (not from nvidia.ko): $(echo $undef) (log: $OUT/build.log)"
fi
echo "$symkey" > "$OUT/.huvm-extra-symbols"
# Warnings in huvm files are errors already (-Werror); show any others on huvm's behalf too.
grep -E '(^|/)huvm/[^:]+:[0-9]+:[0-9]+: warning' "$OUT/build.log" | sed "s|$OUT/||" || true
ko=$OUT/nvidia-uvm.ko
if [ $STOCK = 1 ]; then what="stock (unpatched)"
else what="huvm $(modinfo -F huvm_version "$ko") (ABI $(modinfo -F huvm_abi "$ko"))"; fi
deps=$(modinfo -F depends "$ko")
log "built $ko in $(( $(date +%s) - start ))s: $(modinfo -F vermagic "$ko" | awk '{print $1}'), version $(modinfo -F version "$ko"), $what${deps:+, depends: $deps}"
