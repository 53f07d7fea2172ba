#!/usr/bin/env bash
# huvm-patch.sh: make $BUILD/upstream/work = pristine upstream ($BUILD/upstream/orig) + the patch series
# patches/$UPSTREAM_VERSION/series, every patch applied with zero fuzz (patch -p1 -F0).
#
# Idempotent: work/.huvm-patches/ keeps a copy of each applied patch. Running it again
#   - does nothing when the series is unchanged (and says which files carry unsaved edits, if any);
#   - applies only the new patches when the series grew at its end (local edits are kept);
#   - rebuilds work from orig when patches changed or were reordered, but refuses when work carries
#     edits that no patch holds (save them with `make refresh-patches`, or FORCE=1 to drop them).
# A new tree only replaces work by rename after every patch applied.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/huvm-paths.sh"
STATE=.huvm-patches

die() { echo "huvm-patch: $*" >&2; exit 1; }
log() { echo "huvm-patch: $*"; }

[ -f "$ORIG/.huvm-upstream" ] || die "no pristine upstream in $ORIG (run: make source)"
[ -f "$SERIES" ] || die "no series file $SERIES (upstream $VERSION has no series of its own: UPSTREAM_PATCHES=<a version that has one, e.g. 580.142> applies that one, still at zero fuzz)"

mapfile -t PATCHES < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$SERIES" | awk 'NF {print $1}')
for p in "${PATCHES[@]}"; do [ -f "$PATCHDIR/$p" ] || die "series names $p, but $PATCHDIR/$p does not exist"; done

# apply_patches TREE NAME... : apply each patch (dry run first) and record a copy in TREE/$STATE.
apply_patches() {
    local tree=$1 p out; shift
    mkdir -p "$tree/$STATE"
    for p in "$@"; do
        if ! out=$(cd "$tree" && patch -p1 -F0 -N --dry-run --no-backup-if-mismatch -r - < "$PATCHDIR/$p" 2>&1); then
            die "$p does not apply with zero fuzz: $(echo "$out" | grep -v '^checking\|^patching' | head -n 2 | paste -sd' ' -)"
        fi
        (cd "$tree" && patch -p1 -F0 -N -s --no-backup-if-mismatch -r - < "$PATCHDIR/$p") >/dev/null
        cp "$PATCHDIR/$p" "$tree/$STATE/$p"
        echo "$p" >> "$tree/$STATE/applied"
        log "applied $p"
    done
}

# fresh_tree DIR : DIR = writable copy of orig
fresh_tree() {
    cp -a "$ORIG" "$1"
    chmod -R u+w "$1"
    rm -f "$1/.huvm-upstream"
    mkdir -p "$1/$STATE"
    : > "$1/$STATE/applied"
}

# Files where WORK differs from orig + the patches recorded in WORK/$STATE (i.e. unsaved edits).
unsaved_edits() {
    local ref rc=0
    ref=$(mktemp -d "$(dirname "$WORK")/.ref.XXXXXX")
    fresh_tree "$ref/t"
    local recorded=()
    mapfile -t recorded < "$WORK/$STATE/applied"
    ( PATCHDIR=$WORK/$STATE; for p in "${recorded[@]}"; do
        (cd "$ref/t" && patch -p1 -F0 -N -s --no-backup-if-mismatch -r - < "$PATCHDIR/$p") >/dev/null || exit 1
      done ) || rc=1
    if [ $rc = 0 ]; then
        diff -rq -x "$STATE" "$ref/t" "$WORK" 2>&1 | sed -e "s|^Files $ref/t/\(.*\) and .* differ$|\1|" \
            -e "s|^Only in $WORK/\?\(.*\): \(.*\)$|\1/\2 (new)|" -e "s|^Only in $ref/t/\?\(.*\): \(.*\)$|\1/\2 (removed)|" \
            -e "s|^/||" || true
    else
        echo "(recorded patches no longer apply)"
    fi
    rm -rf "$ref"
}

swap_in() {   # swap_in NEWTREE : replace WORK by NEWTREE (rename)
    local old=
    if [ -e "$WORK" ]; then old=$(mktemp -d "$(dirname "$WORK")/.old.XXXXXX"); mv "$WORK" "$old/t"; fi
    mv "$1" "$WORK"
    [ -z "$old" ] || rm -rf "$old"
}

mkdir -p "$(dirname "$WORK")"
TMP=$(mktemp -d "$(dirname "$WORK")/.patch.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

if [ ! -f "$WORK/$STATE/applied" ]; then
    fresh_tree "$TMP/t"
    apply_patches "$TMP/t" "${PATCHES[@]}"
    swap_in "$TMP/t"
    log "work tree $WORK: upstream $VERSION + ${#PATCHES[@]} patch(es)"
    exit 0
fi

mapfile -t APPLIED < "$WORK/$STATE/applied"
# How many leading patches of the series are applied unchanged?
same=0
while [ $same -lt ${#APPLIED[@]} ] && [ $same -lt ${#PATCHES[@]} ] &&
      [ "${APPLIED[$same]}" = "${PATCHES[$same]}" ] &&
      cmp -s "$WORK/$STATE/${APPLIED[$same]}" "$PATCHDIR/${PATCHES[$same]}"; do
    same=$((same + 1))
done

if [ $same = ${#APPLIED[@]} ] && [ $same = ${#PATCHES[@]} ]; then
    log "series already applied (${#PATCHES[@]} patch(es)) in $WORK"
    edits=$(unsaved_edits)
    [ -z "$edits" ] || log "note: work tree edits not in any patch (save with make refresh-patches): $(echo "$edits" | paste -sd' ' -)"
    exit 0
fi

if [ $same = ${#APPLIED[@]} ]; then
    # The series grew at its end: apply the new patches on top of the current work tree.
    cp -a "$WORK" "$TMP/t"
    apply_patches "$TMP/t" "${PATCHES[@]:$same}"
    swap_in "$TMP/t"
    log "work tree $WORK: upstream $VERSION + ${#PATCHES[@]} patch(es)"
    exit 0
fi

# Patches changed, were removed or reordered: start again from orig, unless that loses edits.
edits=$(unsaved_edits)
if [ -n "$edits" ] && [ "${FORCE:-0}" != 1 ]; then
    die "the series changed and $WORK has edits no patch holds: $(echo "$edits" | paste -sd' ' -); run make refresh-patches first, or FORCE=1 to discard them"
fi
fresh_tree "$TMP/t"
apply_patches "$TMP/t" "${PATCHES[@]}"
swap_in "$TMP/t"
log "work tree $WORK rebuilt: upstream $VERSION + ${#PATCHES[@]} patch(es)"
