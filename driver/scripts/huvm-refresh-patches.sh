#!/usr/bin/env bash
# huvm-refresh-patches.sh: regenerate patches/$UPSTREAM_VERSION/*.patch from the edited work tree.
#
# Rule: every upstream file belongs to exactly one patch (the patch whose diff names it). A patch is
# regenerated as the diff orig -> work of the files it owns; its header (From/Subject/description, up
# to the "---" line) is kept. Changed files that no patch owns go to PATCH=NAME (created and appended
# to the series when new, with SUBJECT= as its subject); without PATCH= they are an error.
# Afterwards orig + the new series must reproduce work exactly (checked), and work's record of applied
# patches is updated, so `make patch` sees nothing to do.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=${ROOT:-$(cd "$HERE/../.." && pwd)}
BUILD=${BUILD:-$ROOT/build}
VERSION=${UPSTREAM_VERSION:-535.261.03}
ORIG=${ORIG:-$BUILD/upstream/orig}
WORK=${WORK:-$BUILD/upstream/work}
PATCHDIR=${PATCHDIR:-$ROOT/patches/$VERSION}
SERIES=$PATCHDIR/series
STATE=.huvm-patches
NEW=${PATCH:-}

die() { echo "huvm-refresh-patches: $*" >&2; exit 1; }
log() { echo "huvm-refresh-patches: $*"; }
export LC_ALL=C

[ -f "$ORIG/.huvm-upstream" ] || die "no pristine upstream in $ORIG (run: make source)"
[ -f "$WORK/$STATE/applied" ] || die "no work tree in $WORK (run: make patch)"
mapfile -t PATCHES < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$SERIES" | awk 'NF {print $1}')
mapfile -t APPLIED < "$WORK/$STATE/applied"
[ "${PATCHES[*]}" = "${APPLIED[*]}" ] ||
    die "work tree has [${APPLIED[*]}] applied but the series is [${PATCHES[*]}]; run make patch first"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# Files each patch owns, from its "diff --git a/X b/X" lines (else "+++ b/X").
owned() {
    local f
    f=$(sed -n 's|^diff --git a/\(\S*\) b/.*|\1|p' "$1")
    [ -n "$f" ] || f=$(sed -n 's|^+++ b/\(\S*\).*|\1|p' "$1")
    echo "$f" | awk NF | sort -u
}
declare -A OWNER
for p in "${PATCHES[@]}"; do
    while read -r f; do
        [ -n "$f" ] || continue
        [ -z "${OWNER[$f]:-}" ] || die "$f is changed by both ${OWNER[$f]} and $p; one file, one patch (merge them)"
        OWNER[$f]=$p
    done < <(owned "$PATCHDIR/$p")
done

# Changed files, relative paths: differing, new in work, gone from work.
changed=$(diff -rq -x "$STATE" -x .huvm-upstream "$ORIG" "$WORK" 2>/dev/null | sed -n \
    -e "s|^Files $ORIG/\(\S*\) and $WORK/.* differ$|M \1|p" \
    -e "s|^Only in $WORK/\?\(.*\): \(.*\)$|A \1/\2|p" \
    -e "s|^Only in $WORK: \(.*\)$|A \1|p" \
    -e "s|^Only in $ORIG/\?\(.*\): \(.*\)$|D \1/\2|p" \
    -e "s|^Only in $ORIG: \(.*\)$|D \1|p" | sed 's|^\([AMD]\) /|\1 |' || true)
grep -q '^D ' <<<"$changed" && die "files removed from the work tree are not supported: $(grep '^D ' <<<"$changed" | cut -c3- | paste -sd' ' -)"
while read -r kind f; do
    [ -n "${f:-}" ] || continue
    [ "$kind" = A ] && [ -d "$WORK/$f" ] && die "new directory $f in the work tree: new files belong in driver/, not in patches"
    if [ -z "${OWNER[$f]:-}" ]; then
        [ -n "$NEW" ] || die "$f is changed but no patch owns it: run make refresh-patches PATCH=NNNN-name.patch [SUBJECT='...']"
        OWNER[$f]=$NEW
    fi
done <<<"$changed"

if [ -n "$NEW" ] && [[ ! " ${PATCHES[*]} " == *" $NEW "* ]]; then
    subject=${SUBJECT:-${NEW%.patch}}
    author="$(git -C "$ROOT" config user.name 2>/dev/null || echo huvm) <$(git -C "$ROOT" config user.email 2>/dev/null || echo huvm@localhost)>"
    printf 'From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\nFrom: %s\nDate: %s\nSubject: [PATCH] %s\n\n%s\n---\n' \
        "$author" "$(date -R)" "$subject" "TODO: say what this patch changes and why." > "$PATCHDIR/$NEW"
    echo "$NEW" >> "$SERIES"
    PATCHES+=("$NEW")
    log "new patch $NEW added to the series"
fi

gitver=$(git --version | awk '{print $3}')
for p in "${PATCHES[@]}"; do
    files=()
    for f in "${!OWNER[@]}"; do [ "${OWNER[$f]}" = "$p" ] && files+=("$f"); done
    mapfile -t files < <(printf '%s\n' "${files[@]}" | awk NF | sort)
    body=$TMP/body
    : > "$body"
    for f in "${files[@]}"; do
        if [ -f "$ORIG/$f" ]; then
            cmp -s "$ORIG/$f" "$WORK/$f" && continue
            echo "diff --git a/$f b/$f" >> "$body"
            diff -u --label "a/$f" --label "b/$f" "$ORIG/$f" "$WORK/$f" >> "$body" || true
        else
            echo "diff --git a/$f b/$f" >> "$body"
            echo "new file mode 100644" >> "$body"
            diff -u --label /dev/null --label "b/$f" /dev/null "$WORK/$f" >> "$body" || true
        fi
    done
    [ -s "$body" ] || die "$p would be empty (its files match upstream again): remove it from $SERIES"
    header=$(awk '{print} /^---$/ {exit}' "$PATCHDIR/$p")
    grep -qx -- '---' <<<"$header" || header=$(printf '%s\n---' "$header")
    {
        printf '%s\n' "$header"
        git apply --stat --summary < "$body"
        echo
        cat "$body"
        printf -- '-- \n%s\n\n' "$gitver"
    } > "$TMP/new"
    if cmp -s "$TMP/new" "$PATCHDIR/$p"; then
        log "$p unchanged"
    else
        cp "$TMP/new" "$PATCHDIR/$p"
        log "$p refreshed (${#files[@]} file(s))"
    fi
done

# Check: orig + series reproduces work exactly, with zero fuzz.
cp -a "$ORIG" "$TMP/check"; chmod -R u+w "$TMP/check"; rm -f "$TMP/check/.huvm-upstream"
for p in "${PATCHES[@]}"; do
    (cd "$TMP/check" && patch -p1 -F0 -N -s --no-backup-if-mismatch -r - < "$PATCHDIR/$p") >/dev/null ||
        die "internal error: refreshed $p does not apply to a fresh tree"
done
diff -rq -x "$STATE" "$TMP/check" "$WORK" >/dev/null || die "internal error: orig + series does not reproduce $WORK"
rm -rf "$WORK/$STATE.new"; mkdir -p "$WORK/$STATE.new"
for p in "${PATCHES[@]}"; do cp "$PATCHDIR/$p" "$WORK/$STATE.new/$p"; echo "$p" >> "$WORK/$STATE.new/applied"; done
rm -rf "$WORK/$STATE"; mv "$WORK/$STATE.new" "$WORK/$STATE"
log "series of ${#PATCHES[@]} patch(es) in $PATCHDIR matches $WORK"
