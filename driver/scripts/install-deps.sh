#!/usr/bin/env bash
# Installs the Debian packages huvm needs (build, static checks, bcc, qemu test bed).
# Does nothing when they are all present; needs root otherwise.
set -euo pipefail
pkgs=(build-essential linux-headers-amd64 python3-venv python3-dev python3-bpfcc bpfcc-tools
      sparse systemtap-sdt-dev qemu-system-x86 busybox-static kmod cpio dkms patch xz-utils)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "install-deps: missing Debian packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})" >&2
        exit 1
    fi
    echo "install-deps: installing ${missing[*]}"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
# bcc compiles against /lib/modules/$(uname -r)/build; on hosts whose running kernel has no headers
# package (containers, CI), point it at the installed Debian headers.
kver=$(uname -r)
if [ ! -e "/lib/modules/$kver/build" ] && [ "$(id -u)" = 0 ]; then
    hdr=$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -n 1)
    common=$(ls -d /usr/src/linux-headers-*-common 2>/dev/null | sort -V | tail -n 1)
    if [ -n "$hdr" ]; then
        mkdir -p "/lib/modules/$kver"
        ln -sfn "$hdr" "/lib/modules/$kver/build"
        ln -sfn "${common:-$hdr}" "/lib/modules/$kver/source"
    fi
fi
