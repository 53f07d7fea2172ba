#!/usr/bin/env bash
# huvm-source.sh: obtain NVIDIA's open kernel modules $UPSTREAM_VERSION (the nvidia-uvm part), verify them
# against pinned SHA-256 sums and unpack them atomically into $DEST (default $BUILD/upstream/orig for
# 535.261.03, $BUILD/upstream-<version>/orig for any other).
#
# Sources, first match wins:
#   UPSTREAM_DIR=DIR          an unpacked tree (e.g. /usr/src/nvidia-current-open-535.261.03, a DKMS tree,
#                             a server's /usr/src/nvidia-580.159.04)
#   UPSTREAM_TARBALL=FILE     nvidia-open-kernel.tar.xz (from nvidia-open-kernel-source) or any tarball
#                             holding the same tree (kernel-open/ of NVIDIA's release tarball)
#   (default)                 what driver/scripts/upstream-<version>.source pins: for 535.261.03 Debian's
#                             nvidia-open-kernel-source .deb, fetched with a private apt config/state under
#                             $BUILD/upstream/cache/apt (the machine's apt config is only read); for 580.142
#                             NVIDIA's kernel-open tarball taken by path (../shared/upstream/, beside the
#                             clone), checksum-pinned
#
# Only the files the nvidia-uvm build needs are kept (see KEEP below); each one is checked against
# driver/scripts/upstream-<version>.sha256 or an alternative manifest upstream-<version>.<origin>.sha256
# (535.261.03: Debian's tree and NVIDIA's git tag differ in 25 files). A version with no manifest yet,
# given by UPSTREAM_DIR or UPSTREAM_TARBALL, gets one recorded on first use (trust on first use; commit
# it to pin the tree). A wrong version or checksum is one line on stderr and exit 1, and nothing is left
# half-unpacked: DEST appears by rename only after every check passed.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/huvm-paths.sh"
DEST=${DEST:-$ORIG}
CACHE=${UPSTREAM_CACHE:-$BUILD/upstream/cache}
# HUVM_MANIFEST_DIR: where the manifests live and a first-use one is recorded (tests: a private folder).
MANIFEST_DIR=${HUVM_MANIFEST_DIR:-$HERE}
MANIFEST=$MANIFEST_DIR/upstream-$VERSION.sha256

# Pins of the default source (upstream-<version>.source): DEB_* for a Debian package, or TARBALL_DEFAULT
# (relative to the repository root) + TARBALL_SHA256 for a tarball given by path. None: UPSTREAM_DIR= or
# UPSTREAM_TARBALL= is required.
DEB_PACKAGE= DEB_VERSION= DEB_SHA256= DEB_TARBALL= TARBALL_SHA256= TARBALL_DEFAULT= DEB_SUITE_PIN=
DEB_COMPONENT=contrib
# shellcheck source=/dev/null
[ ! -f "$HERE/upstream-$VERSION.source" ] || . "$HERE/upstream-$VERSION.source"
DEB_FILE=${DEB_PACKAGE}_${DEB_VERSION}_amd64.deb
DEB_SUITE=${DEB_SUITE:-${DEB_SUITE_PIN:-bookworm}}

# The part of the tree that nvidia-uvm.ko is built from (nvidia/nvidia.Kbuild only for its conftest list;
# header-presence-tests.mk from 550 on, where the top Kbuild includes it).
KEEP=(Kbuild Makefile conftest.sh common nvidia-uvm nvidia/nvidia.Kbuild)
KEEP_OPTIONAL=(header-presence-tests.mk)

die() { echo "huvm-source: $*" >&2; exit 1; }
log() { echo "huvm-source: $*"; }
sha() { sha256sum "$1" | cut -d' ' -f1; }

# The manifests a tree may match: the main one, then alternatives (upstream-<version>.<origin>.sha256).
manifests() {
    local m
    [ ! -f "$MANIFEST" ] || echo "$MANIFEST"
    for m in "$MANIFEST_DIR/upstream-$VERSION".*.sha256; do [ -f "$m" ] && echo "$m"; done
    return 0
}
if [ -z "$(manifests)" ] && [ -z "${UPSTREAM_DIR:-}${UPSTREAM_TARBALL:-}" ]; then
    die "no pinned manifest $MANIFEST for upstream version $VERSION (give its tree once with UPSTREAM_DIR= or UPSTREAM_TARBALL= to record one)"
fi

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

# Record a manifest for a version that has none (trust on first use): the KEEP subset of tree $1.
record_manifest() {
    local src=$1 f out=$MANIFEST.tmp.$$
    (cd "$src" && for f in "${KEEP[@]}" "${KEEP_OPTIONAL[@]}"; do [ ! -e "$f" ] || find "$f" -type f; done |
        LC_ALL=C sort | xargs -d '\n' sha256sum) > "$out" || { rm -f "$out"; die "cannot record a manifest from $src"; }
    mv "$out" "$MANIFEST"
    log "no manifest for $VERSION: recorded $(wc -l < "$MANIFEST") file sums from $src in $MANIFEST (trust on first use; commit it to pin this tree)"
}

# Check version and every pinned file of tree $1 against the first manifest it matches (sets MANIFEST);
# prints the one-line reason on failure.
verify_tree() {
    local src=$1 found bad first n m best= bestn=
    found=$(tree_version "$src")
    [ "$found" = "$VERSION" ] || die "wrong upstream version in $src: found $found, expected $VERSION"
    [ -n "$(manifests)" ] || record_manifest "$src"
    for m in $(manifests); do
        bad=$(cd "$src" && sha256sum --quiet -c "$m" 2>/dev/null | grep -v '^sha256sum:' || true)
        if [ -z "$bad" ]; then MANIFEST=$m; return 0; fi
        n=$(echo "$bad" | wc -l)
        if [ -z "$best" ] || [ "$n" -lt "$bestn" ]; then best=$m; bestn=$n; first=$(echo "$bad" | head -n 1); fi
    done
    die "checksum mismatch in $src: $bestn file(s) differ from the pinned $VERSION manifest, first: $first (expected sums: $(manifests | paste -sd' ' -))"
}

# Copy the KEEP subset of tree $1 into new dir $2 and verify it; then rename into DEST.
install_tree() {
    local src=$1 tmp=$2 f
    verify_tree "$src"
    mkdir -p "$tmp/tree"
    for f in "${KEEP[@]}" "${KEEP_OPTIONAL[@]}"; do
        [ -e "$src/$f" ] || continue
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
    echo "$VERSION ${ORIGIN:-unknown} manifest:$(basename "$MANIFEST")" > "$tmp/origin"
    chmod u+w "$tmp/tree"; mv "$tmp/origin" "$tmp/tree/.huvm-upstream"; chmod u-w "$tmp/tree"
    mkdir -p "$(dirname "$DEST")"
    if [ -e "$DEST" ]; then chmod -R u+w "$DEST"; rm -rf "$DEST"; fi
    mv "$tmp/tree" "$DEST"
}

# Already there and intact: nothing to do (this is what makes a second `make source` instant).
if [ -f "$DEST/.huvm-upstream" ] && [ -z "${UPSTREAM_DIR:-}${UPSTREAM_TARBALL:-}" ]; then
    for m in $(manifests); do
        if (cd "$DEST" && sha256sum --quiet -c "$m" >/dev/null 2>&1); then
            log "upstream $VERSION present in $DEST ($(cut -d' ' -f2- "$DEST/.huvm-upstream"))"
            exit 0
        fi
    done
    log "upstream tree $DEST was modified; unpacking it again"
fi

mkdir -p "$(dirname "$DEST")"
TMP=$(mktemp -d "$(dirname "$DEST")/.source.XXXXXX")
trap 'chmod -R u+w "$TMP" 2>/dev/null; rm -rf "$TMP"' EXIT

unpack_tarball() {   # unpack_tarball FILE [strict]: strict = the pinned default, its sha256 must match
    local tb=$1 s root
    [ -f "$tb" ] || die "UPSTREAM_TARBALL $tb: no such file"
    s=$(sha "$tb")
    if [ "${2:-}" = strict ] && [ "$s" != "$TARBALL_SHA256" ]; then
        die "checksum mismatch for $tb: found sha256 $s, expected $TARBALL_SHA256"
    fi
    mkdir -p "$TMP/x"
    tar -xf "$tb" -C "$TMP/x" || die "cannot unpack $tb (not a tar archive?)"
    root=$(find_root "$TMP/x") || die "no kernel module tree (Kbuild + nvidia-uvm/) in $tb"
    if [ -n "$TARBALL_SHA256" ] && [ "$s" != "$TARBALL_SHA256" ]; then
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
elif [ -z "$DEB_PACKAGE" ] && [ -n "$TARBALL_DEFAULT" ]; then
    # Taken by path, never downloaded (CI reaches only the package registries): the repository's
    # parent folder holds it (../shared/upstream/ beside a clone). In a git worktree, the main
    # checkout's parent is tried too; HUVM_SHARED_DIR=DIR replaces ../shared.
    tb=$ROOT/$TARBALL_DEFAULT
    if [ -n "${HUVM_SHARED_DIR:-}" ]; then
        tb=$HUVM_SHARED_DIR/${TARBALL_DEFAULT#../shared/}
    elif [ ! -f "$tb" ] && common=$(git -C "$ROOT" rev-parse --path-format=absolute --git-common-dir 2>/dev/null) &&
         [ -f "$(dirname "$common")/$TARBALL_DEFAULT" ]; then
        tb=$(dirname "$common")/$TARBALL_DEFAULT
    fi
    [ -f "$tb" ] || die "upstream $VERSION: pinned tarball $tb is missing (put NVIDIA's kernel-open tarball there, or give UPSTREAM_TARBALL= / UPSTREAM_DIR=)"
    unpack_tarball "$(cd "$(dirname "$tb")" && pwd)/$(basename "$tb")" strict
elif [ -z "$DEB_PACKAGE" ]; then
    die "upstream $VERSION has no default source (no $HERE/upstream-$VERSION.source): give UPSTREAM_DIR= (e.g. /usr/src/nvidia-$VERSION) or UPSTREAM_TARBALL="
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
