#!/usr/bin/env bash
# huvm-refresh-patches.sh: fold edits made in the work tree ($BUILD/upstream/work) back into the patch
# series patches/$UPSTREAM_VERSION (a small quilt "refresh" that knows the whole stack).
#
#   PATCH=NAME   the patch that gets the edits: one of the series (any position), or a new name, which
#                is appended to the series (SUBJECT= sets its subject). Without PATCH=, the edits go to
#                the one patch that already changes every edited file; if that is not unique, it says so.
#
# For a patch T in the middle of the series: the later patches are taken back out of a copy of the work
# tree (patch -R, zero fuzz), T is regenerated as the diff between orig + the patches before T and that
# copy, and every later patch whose line numbers moved is re-derived. T's header (From/Subject/text up
# to the "---" line) is kept. At the end orig + the series must reproduce the work tree exactly (checked),
# and the work tree's record of applied patches is updated, so `make patch` has nothing to do.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/huvm-paths.sh"
STATE=.huvm-patches
TARGET=${PATCH:-}

die() { echo "huvm-refresh-patches: $*" >&2; exit 1; }
log() { echo "huvm-refresh-patches: $*"; }
export LC_ALL=C

[ -f "$ORIG/.huvm-upstream" ] || die "no pristine upstream in $ORIG (run: make source)"
[ -f "$WORK/$STATE/applied" ] || die "no work tree in $WORK (run: make patch)"
mapfile -t PATCHES < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$SERIES" | awk 'NF {print $1}')
mapfile -t APPLIED < "$WORK/$STATE/applied"
[ "${PATCHES[*]}" = "${APPLIED[*]}" ] ||
    die "work tree has [${APPLIED[*]}] applied but the series is [${PATCHES[*]}]; run make patch first"
for p in "${PATCHES[@]}"; do
    cmp -s "$PATCHDIR/$p" "$WORK/$STATE/$p" || die "$p changed since it was applied; run make patch first"
done

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

apply() {   # apply DIR PATCHFILE [patch options]: zero fuzz, quiet; prints patch's output
    local d=$1 f=$2; shift 2
    (cd "$d" && patch -p1 -F0 -N --no-backup-if-mismatch -r - "$@" < "$f")
}
tree_at() {   # tree_at DIR N: orig + the first N patches of the series
    cp -a "$ORIG" "$1"; chmod -R u+w "$1"; rm -f "$1/.huvm-upstream"
    local k
    for ((k = 0; k < $2; k++)); do
        apply "$1" "$PATCHDIR/${PATCHES[$k]}" -s >/dev/null || die "${PATCHES[$k]} no longer applies to a fresh tree"
    done
}
changed() {   # changed A B: "M path" / "A path" / "D path" for files that differ
    diff -rq -x "$STATE" -x .huvm-upstream "$1" "$2" 2>/dev/null | sed -n \
        -e "s|^Files $1/\(.*\) and $2/.* differ$|M \1|p" \
        -e "s|^Only in $2/\(.*\): \(.*\)$|A \1/\2|p" -e "s|^Only in $2: \(.*\)$|A \1|p" \
        -e "s|^Only in $1/\(.*\): \(.*\)$|D \1/\2|p" -e "s|^Only in $1: \(.*\)$|D \1|p" | sort -k2 || true
}
body() {   # body A B OUT: git-style unified diff of everything that differs
    local kind f
    : > "$3"
    while read -r kind f; do
        [ -n "${f:-}" ] || continue
        case $kind in
        D) die "$f was removed in the work tree: removing upstream files is not supported";;
        A) [ -d "$2/$f" ] && die "new directory $f: new files belong in driver/, not in patches"
           { echo "diff --git a/$f b/$f"; echo "new file mode 100644"
             diff -u -p --label /dev/null --label "b/$f" /dev/null "$2/$f" || true; } >> "$3";;
        M) { echo "diff --git a/$f b/$f"
             diff -u -p --label "a/$f" --label "b/$f" "$1/$f" "$2/$f" || true; } >> "$3";;
        esac
    done < <(changed "$1" "$2")
}
write_patch() {   # write_patch NAME BODY: keep NAME's header, replace stat + diff
    local header
    header=$(awk '{print} /^---$/ {exit}' "$PATCHDIR/$1")
    grep -qx -- '---' <<<"$header" || header=$(printf '%s\n---' "$header")
    { printf '%s\n' "$header"; git apply --stat --summary < "$2"; echo; cat "$2"
      printf -- '-- \n%s\n\n' "$(git --version | awk '{print $3}')"; } > "$TMP/new.patch"
    if cmp -s "$TMP/new.patch" "$PATCHDIR/$1"; then log "$1 unchanged"
    else cp "$TMP/new.patch" "$PATCHDIR/$1"; log "$1 refreshed"; fi
}
touches() {   # files a patch changes
    sed -n 's|^diff --git a/\(\S*\) b/.*|\1|p; s|^+++ b/\(\S*\).*|\1|p' "$1" | sort -u
}

# --- what changed, and which patch gets it -------------------------------------------------------
n=${#PATCHES[@]}
tree_at "$TMP/series" "$n"
edits=$(changed "$TMP/series" "$WORK")
if [ -z "$edits" ]; then log "the work tree matches the series ($n patches): nothing to refresh"; exit 0; fi
files=$(awk '{print $2}' <<<"$edits")
log "edited: $(echo $files)"

if [ -z "$TARGET" ]; then
    declare -A cand=()
    unowned=()
    keys=
    for f in $files; do
        hit=0
        for p in "${PATCHES[@]}"; do
            if touches "$PATCHDIR/$p" | grep -qx -- "$f"; then cand[$p]=1; hit=1; fi
        done
        [ $hit = 1 ] || unowned+=("$f")
    done
    if [ ${#unowned[@]} = 0 ] && [ ${#cand[@]} = 1 ]; then
        TARGET=${!cand[*]}
    else
        keys=$(printf '%s\n' "${!cand[@]}" | sort | paste -sd' ' -)
        die "say which patch gets the edits: make refresh-patches PATCH=NAME (patches changing these files: ${keys:-none}${unowned[*]:+; in no patch yet: ${unowned[*]}}; a new NAME is appended to the series)"
    fi
fi

idx=-1
for ((k = 0; k < n; k++)); do [ "${PATCHES[$k]}" = "$TARGET" ] && idx=$k; done

if [ $idx = -1 ]; then
    # A new patch on top of the series.
    case $TARGET in */*|"") die "PATCH=$TARGET: give a file name, e.g. 0007-uvm-something.patch";; esac
    subject=${SUBJECT:-${TARGET%.patch}}
    author="$(git -C "$ROOT" config user.name 2>/dev/null || echo huvm) <$(git -C "$ROOT" config user.email 2>/dev/null || echo huvm@localhost)>"
    printf 'From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\nFrom: %s\nDate: %s\nSubject: [PATCH] %s\n\n%s\n---\n' \
        "$author" "$(date -R)" "$subject" "TODO: say what this patch changes and why." > "$PATCHDIR/$TARGET"
    body "$TMP/series" "$WORK" "$TMP/body"
    write_patch "$TARGET" "$TMP/body"
    echo "$TARGET" >> "$SERIES"
    PATCHES+=("$TARGET")
    log "new patch $TARGET appended to $SERIES: write its description"
else
    # Take the later patches back out of a copy of the work tree.
    cp -a "$WORK" "$TMP/top"; rm -rf "$TMP/top/$STATE"
    for ((k = n - 1; k > idx; k--)); do
        apply "$TMP/top" "$PATCHDIR/${PATCHES[$k]}" -R -s >/dev/null 2>&1 ||
            die "cannot take ${PATCHES[$k]} back out of the edited tree with zero fuzz (the edits touch its lines): put them into PATCH=${PATCHES[$k]} or a later patch"
    done
    tree_at "$TMP/base" "$idx"
    body "$TMP/base" "$TMP/top" "$TMP/body"
    [ -s "$TMP/body" ] || die "$TARGET would be empty (its changes are all undone): remove it from $SERIES instead"
    write_patch "$TARGET" "$TMP/body"
    # Re-derive the later patches whose hunks moved (exact ones are kept byte for byte).
    rm -rf "$TMP/base"; cp -a "$TMP/top" "$TMP/base"
    for ((k = idx + 1; k < n; k++)); do
        p=${PATCHES[$k]}
        cp -a "$TMP/base" "$TMP/next"
        out=$(apply "$TMP/next" "$PATCHDIR/$p" 2>&1) || die "internal error: $p does not apply after $TARGET: $out"
        if grep -q 'offset' <<<"$out"; then
            body "$TMP/base" "$TMP/next" "$TMP/body"
            write_patch "$p" "$TMP/body"
        fi
        rm -rf "$TMP/base"; mv "$TMP/next" "$TMP/base"
    done
fi

# --- check: orig + series reproduces the work tree exactly, zero fuzz ---------------------------
rm -rf "$TMP/check"
tree_at "$TMP/check" "${#PATCHES[@]}"
[ -z "$(changed "$TMP/check" "$WORK")" ] || die "internal error: orig + series does not reproduce $WORK: $(changed "$TMP/check" "$WORK" | paste -sd' ' -)"
rm -rf "$WORK/$STATE.new"; mkdir -p "$WORK/$STATE.new"
for p in "${PATCHES[@]}"; do cp "$PATCHDIR/$p" "$WORK/$STATE.new/$p"; echo "$p" >> "$WORK/$STATE.new/applied"; done
rm -rf "${WORK:?}/$STATE"; mv "$WORK/$STATE.new" "$WORK/$STATE"
log "series of ${#PATCHES[@]} patch(es) in $PATCHDIR reproduces $WORK"
