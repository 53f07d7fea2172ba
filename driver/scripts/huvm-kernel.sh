#!/usr/bin/env bash
# huvm-kernel.sh: find the kernel build tree to build nvidia-uvm.ko against; prints three lines
#   KERNEL_OUT=<kbuild output tree>  KERNEL_SRC=<kernel source tree>  KVER=<its UTS release>
# KERNEL_OUT / KERNEL_SRC from the environment win. Otherwise: /lib/modules/$(uname -r)/build when it
# exists, else the newest installed Debian linux-headers-* package (found with dpkg, not guessed).
set -euo pipefail
die() { echo "huvm-kernel: $*" >&2; exit 1; }

out=${KERNEL_OUT:-}
if [ -z "$out" ]; then
    if [ -e "/lib/modules/$(uname -r)/build" ]; then
        out=/lib/modules/$(uname -r)/build
    else
        pkg=$(dpkg-query -W -f='${Package} ${Status}\n' 'linux-headers-*' 2>/dev/null |
              awk '$NF == "installed" && $1 !~ /-common(-rt)?$/ {print $1}' |
              while read -r p; do if [ -f "/usr/src/$p/Makefile" ]; then echo "$p"; fi; done | sort -V | tail -n 1 || true)
        [ -n "$pkg" ] || die "no kernel headers: /lib/modules/$(uname -r)/build is missing and no linux-headers-* package is installed (apt-get install linux-headers-amd64, or set KERNEL_OUT=)"
        out=/usr/src/$pkg
    fi
fi
[ -f "$out/Makefile" ] || die "KERNEL_OUT=$out is not a kernel build tree (no Makefile)"
out=$(readlink -f "$out")
uts=$out/include/generated/utsrelease.h
[ -f "$uts" ] || die "KERNEL_OUT=$out is not configured (no include/generated/utsrelease.h)"
kver=$(sed -n 's/^#define UTS_RELEASE "\(.*\)"/\1/p' "$uts")

src=${KERNEL_SRC:-}
if [ -z "$src" ]; then
    if [ -d "$out/source" ]; then src=$out/source
    elif [ -d "/lib/modules/$kver/source" ]; then src=/lib/modules/$kver/source
    else
        # Debian splits headers: <flavour>/Makefile is "include /usr/src/linux-headers-X-common/Makefile".
        inc=$(sed -n 's/^include[[:space:]]\+\(\S*\)\/Makefile$/\1/p' "$out/Makefile" | head -n 1)
        if [ -n "$inc" ] && [ -d "$inc" ]; then src=$inc; else src=$out; fi
    fi
fi
src=$(readlink -f "$src")
echo "KERNEL_OUT=$out"
echo "KERNEL_SRC=$src"
echo "KVER=$kver"
