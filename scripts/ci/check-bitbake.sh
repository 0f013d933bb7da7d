#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
#
# check-bitbake: the layer through real BitBake, offline. Runs
# ../shared/yocto/bitbake-check (BitBake 2.8 + oe-core scarthgap and 2.18 + oe-core wrynose,
# unchanged exports of the public repositories): `bitbake -p` over every recipe, then fetch,
# unpack and configure of the checkout recipe. About a minute on 2 cores.
#
#   scripts/ci/check-bitbake.sh              the layer as it is in this checkout
#   scripts/ci/check-bitbake.sh --self-test  plants `require ${BPN}-crates.inc` in usbperf.inc (where
#                                      ${BPN} has no recipe name) and passes only when real
#                                      BitBake refuses that layer; scarthgap only, seconds
#
# The layer is staged first as git sees it (tracked and untracked files, not ignored ones), so
# cargo's target/ is not copied. ../shared/yocto is the one thing beside the checkout the
# project's scripts call; without it the check is skipped and says so (exit 0, "SKIPPED").
# USBPERF_BITBAKE_CHECK overrides its path.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CHECK=${USBPERF_BITBAKE_CHECK:-$ROOT/../shared/yocto/bitbake-check}

self_test=0
case ${1:-} in
"") ;;
--self-test) self_test=1 ;;
*) sed -n '4,17p' "$0" >&2; exit 2 ;;
esac

if [ ! -x "$CHECK" ]; then
	echo "check-bitbake: SKIPPED: no real BitBake here ($CHECK does not exist)."
	echo "check-bitbake: the layer was not parsed by BitBake; check it in a checkout that has ../shared/yocto beside it, or with bitbake in a Yocto build."
	exit 0
fi

work=$(mktemp -d /tmp/usbperf-bitbake.XXXXXX)
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
stage=$work/meta-usbperf
mkdir -p "$stage"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard |
	while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
	tar --null -T - -cf -) | tar -C "$stage" -xf -
chmod 755 "$work"

if [ "$self_test" = 0 ]; then
	BBCHECK_WORK=$work/bb "$CHECK" "$stage"
	exit
fi

# The fault this test guards against: the crate list required from the shared .inc. While
# BitBake parses an included file FILE is that file, so ${BPN} expands to "defaultpkgname".
inc=$stage/recipes-test/usbperf/usbperf.inc
sed -i '/^require \${BPN}-crates.inc$/d' "$stage"/recipes-test/usbperf/*.bb
printf '\nrequire ${BPN}-crates.inc\n' >>"$inc"
if BBCHECK_WORK=$work/bb "$CHECK" "$stage" --release scarthgap >"$work/out" 2>&1; then
	cat "$work/out"
	echo "check-bitbake --self-test: FAIL: real BitBake accepted a layer whose usbperf.inc requires \${BPN}-crates.inc" >&2
	exit 1
fi
if ! grep -q 'defaultpkgname-crates.inc' "$work/out"; then
	cat "$work/out"
	echo "check-bitbake --self-test: FAIL: BitBake refused the planted layer, but not for the planted \${BPN} (see above)" >&2
	exit 1
fi
grep -m1 'ERROR' "$work/out" | cut -c1-200
echo "check-bitbake --self-test: ok: real BitBake refuses \${BPN} in a require line of usbperf.inc (defaultpkgname-crates.inc)"
