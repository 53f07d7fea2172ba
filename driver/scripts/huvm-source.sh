#!/usr/bin/env bash
# huvm-source.sh: obtain NVIDIA's open kernel modules 535.261.03 (the nvidia-uvm part), verify them
# against pinned SHA-256 sums and unpack them atomically into $DEST (default $BUILD/upstream/orig).
#
# Sources, first match wins:
#   UPSTREAM_DIR=DIR          an unpacked tree (e.g. /usr/src/nvidia-current-open-535.261.03, a DKMS tree)
#   UPSTREAM_TARBALL=FILE     nvidia-open-kernel.tar.xz (from nvidia-open-kernel-source) or any tarball
#                             holding the same tree (kernel-open/ of NVIDIA's release tarball)
#   (default)                 Debian's nvidia-open-kernel-source .deb, fetched with a private apt
#                             config/state under $BUILD/upstream/cache/apt (the machine's apt config is only read)
#
# Only the files the nvidia-uvm build needs are kept (see KEEP below); each one is checked against
# driver/scripts/upstream-535.261.03.sha256. A wrong version or checksum is one line on stderr and exit 1,
# and nothing is left half-unpacked: DEST appears by rename only after every check passed.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/huvm-paths.sh"
DEST=${DEST:-$BUILD/upstream/orig}
CACHE=${UPSTREAM_CACHE:-$BUILD/upstream/cache}
MANIFEST=$HERE/upstream-$VERSION.sha256

# Pins (Debian bookworm/contrib, nvidia-open-gpu-kernel-modules 535.261.03-1).
DEB_PACKAGE=nvidia-open-kernel-source
DEB_VERSION=535.261.03-1
DEB_FILE=${DEB_PACKAGE}_${DEB_VERSION}_amd64.deb
DEB_SHA256=ee35aa18179ff6406186b3b0744138f5d66084dbca61170599d911a5d8a0c117
DEB_TARBALL=usr/src/nvidia-open-kernel.tar.xz
TARBALL_SHA256=a533145dde9c229dc02fa16704c41c4b02a551c97e34044ee7125c69c3ccc762
DEB_SUITE=${DEB_SUITE:-bookworm}
DEB_COMPONENT=contrib

# The part of the tree that nvidia-uvm.ko is built from (nvidia/nvidia.Kbuild only for its conftest list).
KEEP=(Kbuild Makefile conftest.sh common nvidia-uvm nvidia/nvidia.Kbuild)

die() { echo "huvm-source: $*" >&2; exit 1; }
log() { echo "huvm-source: $*"; }
sha() { sha256sum "$1" | cut -d' ' -f1; }

[ -f "$MANIFEST" ] || die "no pinned manifest $MANIFEST for upstream version $VERSION"

# Version of an unpacked tree, from the top-level Kbuild (ccflags-y += -DNV_VERSION_STRING=\"X\").
tree_version() {
    local kb=$1/Kbuild
    [ -f "$kb" ] || { echo "none (no Kbuild)"; return; }
    sed -n 's/.*-DNV_VERSION_STRING=\\"\([^\\"]*\)\\".*/\1/p' "$kb" | head -n 1 | grep . || echo "unknown"
}

# Find the tree root inside an unpacked tarball: the directory holding Kbuild and nvidia-uvm/.
find_root() {
    local d
    for d in "$1" "$1"/* "$1"/*/* "$1"/*/*/*; do
        if [ -f "$d/Kbuild" ] && [ -d "$d/nvidia-uvm" ]; then echo "$d"; return 0; fi
    done
    return 1
}

# Check version and every pinned file of tree $1; prints the one-line reason on failure.
verify_tree() {
    local src=$1 found bad first n
    found=$(tree_version "$src")
    [ "$found" = "$VERSION" ] || die "wrong upstream version in $src: found $found, expected $VERSION"
    bad=$(cd "$src" && sha256sum --quiet -c "$MANIFEST" 2>/dev/null | grep -v '^sha256sum:' || true)
    if [ -n "$bad" ]; then
        n=$(echo "$bad" | wc -l)
        first=$(echo "$bad" | head -n 1)
        die "checksum mismatch in $src: $n file(s) differ from the pinned $VERSION manifest, first: $first (expected sums: $MANIFEST)"
    fi
}

# Copy the KEEP subset of tree $1 into new dir $2 and verify it; then rename into DEST.
install_tree() {
    local src=$1 tmp=$2 f
    verify_tree "$src"
    mkdir -p "$tmp/tree"
    for f in "${KEEP[@]}"; do
        mkdir -p "$tmp/tree/$(dirname "$f")"
        cp -a "$src/$f" "$tmp/tree/$f"
    done
    # Extra files (build leftovers in a DKMS tree) are dropped: keep exactly the manifest.
    (cd "$tmp/tree" && find . -type f | sed 's|^\./||' | sort) > "$tmp/have"
    awk '{print $2}' "$MANIFEST" | sed 's|^\*||' | sort > "$tmp/want"
    comm -23 "$tmp/have" "$tmp/want" | (cd "$tmp/tree" && xargs -r rm -f)
    find "$tmp/tree" -depth -type d -empty -delete
    (cd "$tmp/tree" && sha256sum --quiet -c "$MANIFEST" >/dev/null 2>&1) ||
        die "internal error: copied tree does not match $MANIFEST"
    chmod -R a-w "$tmp/tree"
    echo "$VERSION ${ORIGIN:-unknown}" > "$tmp/origin"
    chmod u+w "$tmp/tree"; mv "$tmp/origin" "$tmp/tree/.huvm-upstream"; chmod u-w "$tmp/tree"
    mkdir -p "$(dirname "$DEST")"
    if [ -e "$DEST" ]; then chmod -R u+w "$DEST"; rm -rf "$DEST"; fi
    mv "$tmp/tree" "$DEST"
}

# Already there and intact: nothing to do (this is what makes a second `make source` instant).
if [ -f "$DEST/.huvm-upstream" ] && [ -z "${UPSTREAM_DIR:-}${UPSTREAM_TARBALL:-}" ]; then
    if (cd "$DEST" && sha256sum --quiet -c "$MANIFEST" >/dev/null 2>&1); then
        log "upstream $VERSION present in $DEST ($(cut -d' ' -f2- "$DEST/.huvm-upstream"))"
        exit 0
    fi
    log "upstream tree $DEST was modified; unpacking it again"
fi

mkdir -p "$(dirname "$DEST")"
TMP=$(mktemp -d "$(dirname "$DEST")/.source.XXXXXX")
trap 'chmod -R u+w "$TMP" 2>/dev/null; rm -rf "$TMP"' EXIT

unpack_tarball() {
    local tb=$1 s root
    [ -f "$tb" ] || die "UPSTREAM_TARBALL $tb: no such file"
    s=$(sha "$tb")
    mkdir -p "$TMP/x"
    tar -xf "$tb" -C "$TMP/x" || die "cannot unpack $tb (not a tar archive?)"
    root=$(find_root "$TMP/x") || die "no kernel module tree (Kbuild + nvidia-uvm/) in $tb"
    if [ "$s" != "$TARBALL_SHA256" ]; then
        # Not the pinned Debian tarball; still fine when the nvidia-uvm files match the pinned manifest.
        log "$tb: sha256 $s is not the pinned $TARBALL_SHA256; checking its files one by one"
    fi
    ORIGIN="tarball:$tb" install_tree "$root" "$TMP/out"
}

if [ -n "${UPSTREAM_DIR:-}" ]; then
    [ -d "$UPSTREAM_DIR" ] || die "UPSTREAM_DIR $UPSTREAM_DIR: no such directory"
    ORIGIN="dir:$UPSTREAM_DIR" install_tree "$UPSTREAM_DIR" "$TMP/out"
elif [ -n "${UPSTREAM_TARBALL:-}" ]; then
    unpack_tarball "$UPSTREAM_TARBALL"
else
    deb=$CACHE/$DEB_FILE
    if [ -f "$deb" ] && [ "$(sha "$deb")" = "$DEB_SHA256" ]; then
        log "using cached $deb"
    else
        # Private apt: own sources.list, lists and cache; only the keyring and apt.conf.d (proxies) are shared.
        mirror=${DEBIAN_MIRROR:-}
        if [ -z "$mirror" ]; then
            mirror=$(sed -n 's/^URIs:[[:space:]]*\(\S*\/debian\)\/\?\s*$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1)
            [ -n "$mirror" ] || mirror=$(sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\(\S*\/debian\)\/\?[[:space:]].*/\2/p' /etc/apt/sources.list 2>/dev/null | head -n 1)
            [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
        fi
        opts="signed-by=/usr/share/keyrings/debian-archive-keyring.gpg"
        case $mirror in *snapshot.debian.org*) opts="$opts check-valid-until=no";; esac
        A=$CACHE/apt
        mkdir -p "$A/lists/partial" "$A/archives/partial" "$A/etc/sources.list.d" "$A/etc/preferences.d"
        echo "deb [$opts] $mirror $DEB_SUITE $DEB_COMPONENT" > "$A/etc/sources.list"
        APT=(-q -o Dir::Etc::sourcelist="$A/etc/sources.list" -o Dir::Etc::sourceparts="$A/etc/sources.list.d"
             -o Dir::Etc::preferences="$A/etc/preferences" -o Dir::Etc::preferencesparts="$A/etc/preferences.d"
             -o Dir::State::Lists="$A/lists" -o Dir::Cache="$A" -o Dir::Cache::archives="$A/archives"
             -o Dir::Cache::pkgcache="" -o Dir::Cache::srcpkgcache="" -o Debug::NoLocking=1
             -o APT::Sandbox::User="$(id -un)")
        log "apt-get update ($mirror $DEB_SUITE $DEB_COMPONENT, private state in $A)"
        apt-get "${APT[@]}" update >"$A/update.log" 2>&1 || die "apt-get update failed (log: $A/update.log)"
        have=$(apt-cache "${APT[@]}" madison "$DEB_PACKAGE" 2>/dev/null | awk -F'|' '{gsub(/ /,"",$2); print $2}' | paste -sd, -)
        case ",$have," in
            *",$DEB_VERSION,"*) ;;
            *) die "$DEB_PACKAGE $DEB_VERSION not in $mirror $DEB_SUITE/$DEB_COMPONENT: found ${have:-none}, expected $DEB_VERSION (set DEBIAN_MIRROR= to a snapshot.debian.org archive that has it, or UPSTREAM_TARBALL= / UPSTREAM_DIR=)";;
        esac
        mkdir -p "$TMP/dl"; chmod 755 "$TMP" "$TMP/dl"
        (cd "$TMP/dl" && apt-get "${APT[@]}" download "$DEB_PACKAGE=$DEB_VERSION" >"$A/download.log" 2>&1) ||
            die "apt-get download $DEB_PACKAGE=$DEB_VERSION failed (log: $A/download.log)"
        got=$(sha "$TMP/dl/$DEB_FILE")
        [ "$got" = "$DEB_SHA256" ] || die "checksum mismatch for $DEB_FILE: found sha256 $got, expected $DEB_SHA256"
        mv "$TMP/dl/$DEB_FILE" "$deb"
        log "cached $deb"
    fi
    v=$(dpkg-deb -f "$deb" Version)
    [ "$v" = "$DEB_VERSION" ] || die "wrong package version in $deb: found $v, expected $DEB_VERSION"
    mkdir -p "$TMP/deb"
    dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$TMP/deb" "./$DEB_TARBALL"
    got=$(sha "$TMP/deb/$DEB_TARBALL")
    [ "$got" = "$TARBALL_SHA256" ] || die "checksum mismatch for $DEB_TARBALL in $deb: found sha256 $got, expected $TARBALL_SHA256"
    mkdir -p "$TMP/x"
    tar -xf "$TMP/deb/$DEB_TARBALL" -C "$TMP/x"
    root=$(find_root "$TMP/x") || die "no kernel module tree in $DEB_TARBALL"
    ORIGIN="deb:$DEB_FILE" install_tree "$root" "$TMP/out"
fi
log "upstream $VERSION verified and unpacked into $DEST"
