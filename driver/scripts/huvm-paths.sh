# Sourced by driver/scripts/huvm-*.sh after they set HERE (their own folder): the paths they share.
# Each can be overridden from the environment (the Makefile exports ROOT, BUILD and UPSTREAM_VERSION).
# shellcheck shell=bash
ROOT=${ROOT:-$(cd "$HERE/../.." && pwd)}
BUILD=${BUILD:-$ROOT/build}
VERSION=${UPSTREAM_VERSION:-535.261.03}
ORIG=${ORIG:-$BUILD/upstream/orig}          # pristine upstream, as `make source` unpacked it
WORK=${WORK:-$BUILD/upstream/work}          # upstream + the patch series (`make patch`)
PATCHDIR=${PATCHDIR:-$ROOT/patches/$VERSION}
SERIES=$PATCHDIR/series
