# Sourced by driver/scripts/huvm-*.sh after they set HERE (their own folder): the paths they share.
# Each can be overridden from the environment (the Makefile exports ROOT, BUILD and UPSTREAM_VERSION).
# shellcheck shell=bash
ROOT=${ROOT:-$(cd "$HERE/../.." && pwd)}
BUILD=${BUILD:-$ROOT/build}
VERSION=${UPSTREAM_VERSION:-535.261.03}
# The default upstream keeps the historical paths; any other gets its own (build/upstream-580.142/...),
# so that both branches' trees and builds live side by side.
HUVM_DEFAULT_UPSTREAM=535.261.03
if [ "$VERSION" = "$HUVM_DEFAULT_UPSTREAM" ]; then VSUFFIX=; else VSUFFIX=-$VERSION; fi
ORIG=${ORIG:-$BUILD/upstream$VSUFFIX/orig}  # pristine upstream, as `make source` unpacked it
WORK=${WORK:-$BUILD/upstream$VSUFFIX/work}  # upstream + the patch series (`make patch`)
# The series: patches/<version>/, or another version's (UPSTREAM_PATCHES=580.142 for a 580.x tree
# that has no series of its own yet; make patch still applies it at zero fuzz or refuses).
PATCHDIR=${PATCHDIR:-$ROOT/patches/${UPSTREAM_PATCHES:-$VERSION}}
SERIES=$PATCHDIR/series
