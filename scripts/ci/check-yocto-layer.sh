#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
#
# check-yocto-layer: the checks of the meta-usbperf layer that need no BitBake. Real BitBake
# (scarthgap and wrynose: parse, fetch, unpack, configure) is scripts/ci/check-bitbake.sh, which
# scripts/test.sh runs before this. A check below that re-implements a rule of BitBake, oe-core
# or yocto-check-layer instead of running it says "approximation" in its output:
#
#   oelint-scarthgap/wrynose  oelint-adv clean for both releases (.oelint.cfg)
#   recipe-version            usbperf_<version>.bb matches Cargo.toml
#   license-checksums         LIC_FILES_CHKSUM md5s match LICENSE-*
#   src-uri-files             every file:// entry of the recipe exists
#   crates-inc                scripts/maint/update-crates-inc.py --check
#   msrv-lock                 scripts/ci/check-msrv-lock.py (scarthgap: Rust 1.75)
#   vendor-build              scripts/ci/check-vendor.py (bitbake-style vendoring,
#                             offline cargo build)
#   feature-sets              cargo check of the other PACKAGECONFIG feature
#                             sets (udev only: no io_uring; none)
#   systemd-verify            systemd-analyze verify of the unit, ExecStart
#                             pointing at the built binary through usbperf-boot
#   default-config            the shipped usbperf.yaml and board profiles pass
#                             `usbperf-matrix run --dry-run` (runs nothing)
#   shell-syntax              sh -n on the init script, usbperf-boot, defaults
#   boot-logic                usbperf-boot/init script run-once behaviour,
#                             with a stub usbperf-matrix
#   kas-schema                kas/*.yml against kas's configuration schema
#   readme                    README.md passes every check of oe-core's
#                             yocto-check-layer test_readme (scarthgap and
#                             wrynose), none skipped; at most 250 lines
#   git-recipe                usbperf_git.bb: SRCREV is a commit of this
#                             repository with the Cargo.lock of the .inc
#   man-pages                 doc/man/ and completions/ are what doc/gen makes
#                             of the clap definitions; `man -l` renders them
#   package-files             the do_install lines put usbperf-matrix.1 and
#                             the completions where oe-core's FILES put them
#                             in ${PN}-doc and ${PN}-*-completion
#   ptest-logic               run-ptest (busybox sh) with fake libtest
#                             binaries and planted faults: exact ptest lines
#   ptest-aarch64             run-ptest with the aarch64 test binaries and
#                             usbperf-matrix under qemu-user, installed as
#                             ptest-cargo installs them (scripts/ci/check-ptest.py)
#   oeqa-case                 lib/oeqa/runtime/cases/usbperf.py through a fake
#                             oeqa target on this machine (scripts/ci/test-oeqa-case.py)
#
# Installs what it needs (Debian 12, as root): apt systemd, libudev-dev,
# pkg-config, python3-venv, busybox, man-db, umockdev, e2fsprogs; oelint-adv
# and kas (pinned) in a venv under target/.
# Needs cargo in PATH. Exits non-zero if any check fails and says which.
# Usage: scripts/ci/check-yocto-layer.sh [CHECK...]   (default: all)

set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"

OELINT_ADV_VERSION=9.11.2
OELINT_PARSER_VERSION=8.13.2
OELINT_DATA_VERSION=1.5.26
KAS_VERSION=5.5
OELINT_VENV=${OELINT_VENV:-$ROOT/target/oelint-venv}
export CHECK_VENDOR_TARGET_DIR=${CHECK_VENDOR_TARGET_DIR:-$ROOT/target/check-vendor}
RECIPE_DIR=recipes-test/usbperf
RELEASES="scarthgap wrynose"

passed=()
failed=()
note() { printf '\n=== check-yocto-layer: %s\n' "$*"; }

# --- setup ---------------------------------------------------------------
install_deps() {
	local missing=() p
	for p in systemd libudev-dev pkg-config python3-venv busybox man-db umockdev e2fsprogs; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		note "apt-get install ${missing[*]}"
		if [ "$(id -u)" -ne 0 ]; then
			echo "check-yocto-layer: need root to install ${missing[*]}" >&2
			return 1
		fi
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || return 1
	fi
	if ! "$OELINT_VENV/bin/oelint-adv" --version 2>/dev/null | grep -q "$OELINT_ADV_VERSION" ||
		! "$OELINT_VENV/bin/kas" --version 2>&1 | grep -q "$KAS_VERSION"; then
		note "pip install oelint-adv==$OELINT_ADV_VERSION kas==$KAS_VERSION into $OELINT_VENV"
		rm -rf "$OELINT_VENV"
		/usr/bin/python3 -m venv "$OELINT_VENV" || python3 -m venv "$OELINT_VENV" || return 1
		"$OELINT_VENV/bin/pip" install -q --disable-pip-version-check \
			"oelint-adv==$OELINT_ADV_VERSION" "oelint-parser==$OELINT_PARSER_VERSION" \
			"oelint-data==$OELINT_DATA_VERSION" "kas==$KAS_VERSION" || return 1
	fi
	command -v cargo >/dev/null || { echo "check-yocto-layer: cargo not found in PATH" >&2; return 1; }
}

# --- checks ----------------------------------------------------------------
# The recipe of this checkout, usbperf_<version>.bb (usbperf_git.bb is the
# other one).
recipe_file() {
	local f
	f=$(ls "$RECIPE_DIR"/usbperf_[0-9]*.bb 2>/dev/null)
	[ "$(echo "$f" | wc -w)" -eq 1 ] || { echo "expected exactly one $RECIPE_DIR/usbperf_<version>.bb, found: $f" >&2; return 1; }
	echo "$f"
}

# What the recipes say, with the include both share.
recipe_text() {
	local recipe
	recipe=$(recipe_file) || return 1
	cat "$recipe" "$RECIPE_DIR/usbperf.inc"
}

check_oelint() {
	local release=$1 files
	files=$(find recipes-* -name '*.bb' -o -name '*.bbappend' -o -name '*.inc' | sort)
	# The findings of a clean run are empty; --quiet prints findings only.
	# shellcheck disable=SC2086
	OELINT_CONFIG="$ROOT/.oelint.cfg" "$OELINT_VENV/bin/oelint-adv" --quiet --jobs 1 \
		--release "$release" $files
}

check_recipe_version() {
	local recipe pv cv
	recipe=$(recipe_file) || return 1
	pv=$(basename "$recipe" .bb); pv=${pv#usbperf_}
	cv=$(sed -n '/^\[package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml | head -n1)
	echo "recipe PV=$pv, Cargo.toml version=$cv"
	[ "$pv" = "$cv" ] || { echo "rename $recipe to usbperf_$cv.bb" >&2; return 1; }
}

check_license_checksums() {
	local text n=0 rc=0 file md5 actual
	text=$(recipe_text) || return 1
	while read -r file md5; do
		n=$((n + 1))
		actual=$(md5sum "$file" | cut -d' ' -f1)
		if [ "$actual" = "$md5" ]; then
			echo "$file md5 $md5 OK"
		else
			echo "$file: recipe says md5=$md5, file has $actual" >&2; rc=1
		fi
	done < <(echo "$text" | grep -o 'file://[^; "]*;md5=[0-9a-f]*' | sed 's|file://||; s|;md5=| |')
	[ "$n" -gt 0 ] || { echo "no LIC_FILES_CHKSUM entries found" >&2; return 1; }
	return $rc
}

check_src_uri_files() {
	local text rc=0 f
	echo "approximation: the file:// paths looked up by hand; BitBake's own fetch is scripts/ci/check-bitbake.sh"
	text=$(recipe_text) || return 1
	for f in $(echo "$text" | grep -o 'file://[^; "]*' | sed 's|file://||' | sort -u); do
		case $f in LICENSE-*) continue ;; esac  # checked above
		if [ -e "$RECIPE_DIR/files/$f" ] || [ -e "$ROOT/$f" ]; then
			echo "file://$f found"
		else
			echo "file://$f: neither $RECIPE_DIR/files/$f nor $f exists" >&2; rc=1
		fi
	done
	return $rc
}

# Install the boot files the way do_install does, into a scratch tree, with
# @BINDIR@ pointing at the binary built by check-vendor (or a stub).
stage_boot_files() {
	local dest=$1 bindir=$2
	mkdir -p "$dest/libexec/usbperf" "$dest/etc/default" "$dest/etc/usbperf" "$dest/var/lib/usbperf/reports" "$dest/system" "$dest/init.d"
	local sed_paths=(-e "s,@BINDIR@,$bindir,g" -e "s,@LIBEXECDIR@,$dest/libexec,g"
		-e "s,@SYSCONFDIR@,$dest/etc,g" -e "s,@LOCALSTATEDIR@,$dest/var,g")
	sed "${sed_paths[@]}" "$RECIPE_DIR/files/usbperf-boot" > "$dest/libexec/usbperf/usbperf-boot"
	sed "${sed_paths[@]}" "$RECIPE_DIR/files/usbperf-matrix.service" > "$dest/system/usbperf-matrix.service"
	sed "${sed_paths[@]}" "$RECIPE_DIR/files/usbperf-upload.service" > "$dest/system/usbperf-upload.service"
	sed "${sed_paths[@]}" "$RECIPE_DIR/files/usbperf-matrix.init" > "$dest/init.d/usbperf-matrix"
	sed -e "s,^CONFIG=.*,CONFIG=$dest/etc/usbperf/usbperf.yaml," "$RECIPE_DIR/files/usbperf.default" > "$dest/etc/default/usbperf"
	cp "$RECIPE_DIR/files/usbperf.yaml" "$dest/etc/usbperf/usbperf.yaml"
	chmod 0755 "$dest/libexec/usbperf/usbperf-boot" "$dest/init.d/usbperf-matrix"
}

check_systemd_verify() {
	local tmp bin out rc
	bin="$CHECK_VENDOR_TARGET_DIR/target/debug/usbperf-matrix"
	[ -x "$bin" ] || { echo "no built binary at $bin (vendor-build must run first)" >&2; return 1; }
	tmp=$(mktemp -d)
	stage_boot_files "$tmp" "$(dirname "$bin")"
	# ExecStart must name an existing executable; the unit starts usbperf-boot,
	# which runs $bin.
	grep -E '^(ExecStart|ConditionPathExists)=' "$tmp/system/usbperf-matrix.service"
	out=$(SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --man=no "$tmp/system/usbperf-matrix.service" \
		"$tmp/system/usbperf-upload.service" 2>&1)
	rc=$?
	echo "$out"
	# Unrelated units of the host may warn; anything about ours fails.
	if [ $rc -ne 0 ] || echo "$out" | grep -q 'usbperf'; then
		rm -rf "$tmp"; return 1
	fi
	# Never start the real run here: it would test this machine's disks.
	"$bin" --version || { rm -rf "$tmp"; return 1; }
	rm -rf "$tmp"
}

# The shipped default configuration and the example board profiles are
# accepted by the built binary (`run --dry-run` resolves the configuration
# and the devices and runs nothing; unknown keys and bad values fail).
check_default_config() {
	local tmp bin rc=0 p
	bin="$CHECK_VENDOR_TARGET_DIR/target/debug/usbperf-matrix"
	[ -x "$bin" ] || { echo "no built binary at $bin (vendor-build must run first)" >&2; return 1; }
	tmp=$(mktemp -d)
	stage_boot_files "$tmp" "$(dirname "$bin")"
	set -- --report-dir "$tmp/reports" --lock-file "$tmp/lock" --dry-run
	if "$bin" run --config "$tmp/etc/usbperf/usbperf.yaml" "$@" > "$tmp/out" 2>&1; then
		echo "default usbperf.yaml: accepted"
	else
		cat "$tmp/out" >&2; echo "default usbperf.yaml: rejected" >&2; rc=1
	fi
	for p in profiles/boards/*.yaml; do
		[ -e "$p" ] || continue
		if "$bin" run --config "$tmp/etc/usbperf/usbperf.yaml" --profile "$ROOT/$p" "$@" > "$tmp/out" 2>&1; then
			echo "$p: accepted"
		else
			cat "$tmp/out" >&2; echo "$p: rejected" >&2; rc=1
		fi
	done
	rm -rf "$tmp"
	return $rc
}

check_shell_syntax() {
	local f rc=0
	for f in "$RECIPE_DIR/files/usbperf-matrix.init" "$RECIPE_DIR/files/usbperf-boot" "$RECIPE_DIR/files/usbperf.default" "$RECIPE_DIR/files/run-ptest" scripts/maint/seed-dl-dir.sh; do
		if sh -n "$f"; then echo "sh -n $f OK"; else rc=1; fi
	done
	if command -v dash >/dev/null; then
		for f in "$RECIPE_DIR/files/usbperf-matrix.init" "$RECIPE_DIR/files/usbperf-boot" "$RECIPE_DIR/files/run-ptest"; do
			dash -n "$f" || rc=1
		done
	fi
	# run-ptest runs in busybox sh on a minimal image, the wrapup script in Toradex Easy
	# Installer's busybox.
	for f in "$RECIPE_DIR/files/run-ptest" contrib/toradex/wrapup.sh; do
		if busybox sh -n "$f" && dash -n "$f"; then echo "busybox sh -n, dash -n $f OK"; else rc=1; fi
	done
	return $rc
}

# Run-once behaviour of usbperf-boot and the init script with a stub
# usbperf-matrix that logs its arguments and exits with $STUB_RC.
check_boot_logic() {
	local tmp rc=0 got
	tmp=$(mktemp -d)
	mkdir -p "$tmp/bin"
	cat > "$tmp/bin/usbperf-matrix" <<-'STUB'
	#!/bin/sh
	echo "$@" >> "$STUB_LOG.all"
	if [ "$1" = power-cut ]; then
		# the verify removes the state it judged and writes its report, as the real one does
		if [ "$2" = verify ]; then
			rm -f "$4"
			[ "$7" = --report-dir ] && : > "$8/usbperf-power-cut-U1-20260101T000000Z-0a1b2c3d.json"
		fi
		exit "${STUB_PC_RC:-0}"
	fi
	[ "$1" = upload ] && exit 0
	echo "$@" > "$STUB_LOG"
	echo "${USBPERF_PHASE:-}" > "$STUB_LOG.phase"
	exit "${STUB_RC:-0}"
	STUB
	chmod 0755 "$tmp/bin/usbperf-matrix"
	stage_boot_files "$tmp" "$tmp/bin"
	local boot="$tmp/libexec/usbperf/usbperf-boot" stamp="$tmp/var/lib/usbperf/done"
	export STUB_LOG="$tmp/args"
	expect() {  # expect DESCRIPTION WANTED_RC [STAMP yes|no] -- command...
		local what=$1 want=$2 wstamp=$3 have; shift 4
		"$@" >/dev/null 2>&1; have=$?
		local hstamp=no; [ -e "$stamp" ] && hstamp=yes
		if [ "$have" = "$want" ] && [ "$hstamp" = "$wstamp" ]; then
			echo "ok: $what (exit $have, stamp $hstamp)"
		else
			echo "FAIL: $what: exit $have (want $want), stamp $hstamp (want $wstamp)" >&2; rc=1
		fi
	}
	sed -i 's/^RUN_ONCE=.*/RUN_ONCE=1/; s/^PROFILE=.*/PROFILE=board-x/' "$tmp/etc/default/usbperf"
	STUB_RC=3 expect "run-once, interrupted run: no stamp" 3 no -- "$boot"
	got=$(cat "$STUB_LOG")
	case $got in
	"run --config $tmp/etc/usbperf/usbperf.yaml --profile board-x") echo "ok: arguments: $got" ;;
	*) echo "FAIL: unexpected arguments: $got" >&2; rc=1 ;;
	esac
	sed -i -e 's/^WAIT_DEVICES=.*/WAIT_DEVICES=45s/' -e "s|^REPORT_DIR=.*|REPORT_DIR=$tmp/r|" \
		-e 's/^EXTRA_ARGS=.*/EXTRA_ARGS="--engine sync"/' "$tmp/etc/default/usbperf"
	STUB_RC=2 expect "run-once, configuration error: no stamp" 2 no -- "$boot"
	got=$(cat "$STUB_LOG")
	case $got in
	"run --config $tmp/etc/usbperf/usbperf.yaml --profile board-x --report-dir $tmp/r --wait-devices 45s --engine sync") echo "ok: arguments: $got" ;;
	*) echo "FAIL: unexpected arguments: $got" >&2; rc=1 ;;
	esac
	STUB_RC=4 expect "run-once, tool error: no stamp" 4 no -- "$boot"
	STUB_RC=1 expect "run-once, failed verdict: stamp" 1 yes -- "$boot"
	rm -f "$STUB_LOG"
	STUB_RC=1 expect "run-once, stamp present: skipped" 0 yes -- "$boot"
	[ ! -e "$STUB_LOG" ] || { echo "FAIL: usbperf-matrix ran despite the stamp" >&2; rc=1; }
	# FIELD=1: with the stamp, a field run of FIELD_CONFIG, which leaves the stamp as it is.
	sed -i -e 's/^FIELD=.*/FIELD=1/' -e "s|^FIELD_CONFIG=.*|FIELD_CONFIG=$tmp/field.yaml|" "$tmp/etc/default/usbperf"
	STUB_RC=1 expect "run-once, stamp present, FIELD=1: a field run" 1 yes -- "$boot"
	got="$(cat "$STUB_LOG.phase") $(cat "$STUB_LOG")"
	case $got in
	"field run --config $tmp/field.yaml --profile board-x --report-dir $tmp/r --wait-devices 45s --engine sync") echo "ok: field run: $got" ;;
	*) echo "FAIL: unexpected field run: $got" >&2; rc=1 ;;
	esac
	sed -i 's/^FIELD=.*/FIELD=0/' "$tmp/etc/default/usbperf"
	# POWER_CUT_STATE: a state found at boot is verified first, even with the stamp; its
	# failure is the exit status when the run has none; the write phase follows.
	sed -i -e "s|^POWER_CUT_STATE=.*|POWER_CUT_STATE=$tmp/pc.state|" \
		-e "s|^POWER_CUT_WRITE_ARGS=.*|POWER_CUT_WRITE_ARGS=\"--target $tmp/pc.bin --size 8M\"|" "$tmp/etc/default/usbperf"
	: > "$tmp/pc.state"; rm -f "$STUB_LOG.all"
	STUB_PC_RC=1 expect "stamp present, power-cut state: verified (fail), then skipped" 1 yes -- "$boot"
	got=$(cat "$STUB_LOG.all")
	case $got in
	"power-cut verify --state $tmp/pc.state --out $tmp/var/lib/usbperf/power-cut/power-cut-"*".json --report-dir $tmp/var/lib/usbperf/power-cut/.new-"*"
upload --if-configured --config $tmp/etc/usbperf/usbperf.yaml --attempts 1 --timeout 5s $tmp/var/lib/usbperf/power-cut/usbperf-power-cut-U1-20260101T000000Z-0a1b2c3d.json
power-cut write --state $tmp/pc.state --target $tmp/pc.bin --size 8M") echo "ok: power-cut: verify, then the write phase" ;;
	*) echo "FAIL: unexpected power-cut calls: $got" >&2; rc=1 ;;
	esac
	rm -f "$STUB_LOG.all"
	STUB_PC_RC=4 expect "stamp present, no power-cut state: the write phase only, its failure the exit status" 4 yes -- "$boot"
	case $(cat "$STUB_LOG.all") in
	"power-cut write --state $tmp/pc.state --target $tmp/pc.bin --size 8M") echo "ok: no state: no verify" ;;
	*) echo "FAIL: unexpected power-cut calls: $(cat "$STUB_LOG.all")" >&2; rc=1 ;;
	esac
	rm -f "$stamp"; : > "$tmp/pc.state"
	STUB_PC_RC=1 STUB_RC=0 expect "power-cut fail, run passes: exit 1 (the run's stamp)" 1 yes -- "$boot"
	rm -f "$stamp"; : > "$tmp/pc.state"
	STUB_PC_RC=1 STUB_RC=4 expect "power-cut fail, run tool error: the run's exit" 4 no -- "$boot"
	sed -i -e "s|^POWER_CUT_STATE=.*|POWER_CUT_STATE=|" "$tmp/etc/default/usbperf"
	touch "$stamp"
	STUB_RC=0 expect "init script start, stamp present: skipped" 0 yes -- "$tmp/init.d/usbperf-matrix" start
	expect "init script status" 0 yes -- "$tmp/init.d/usbperf-matrix" status
	rm -f "$stamp"
	STUB_RC=0 expect "init script start, run-once, pass: stamp" 0 yes -- "$tmp/init.d/usbperf-matrix" start
	rm -f "$stamp"
	sed -i 's/^RUN_ONCE=.*/RUN_ONCE=0/' "$tmp/etc/default/usbperf"
	STUB_RC=0 expect "every boot, pass: no stamp" 0 no -- "$boot"
	STUB_RC=1 expect "every boot, failed verdict: exit 1, no stamp" 1 no -- "$boot"
	# RUN_ONCE=0 must run at every boot under systemd too: the unit itself may not
	# be conditioned on the stamp (usbperf-boot alone reads RUN_ONCE and the stamp).
	if grep -q '^ConditionPathExists=.*done' "$tmp/system/usbperf-matrix.service"; then
		echo "FAIL: usbperf-matrix.service skips on the stamp whatever RUN_ONCE says" >&2; rc=1
	else
		echo "ok: the unit leaves run-once to usbperf-boot (RUN_ONCE=0 runs every boot)"
	fi
	rm -rf "$tmp"
	return $rc
}

# The PACKAGECONFIG combinations the recipe builds besides the default
# (udev uring upload upload-tls): https, uring and udev can each be turned off.
check_feature_sets() {
	local features rc=0
	for features in "udev uring upload" "udev" ""; do
		echo "cargo check --no-default-features --features '$features'"
		cargo check --locked --quiet --manifest-path "$ROOT/Cargo.toml" \
			--target-dir "$CHECK_VENDOR_TARGET_DIR/feature-sets" \
			--no-default-features --features "$features" || rc=1
	done
	return $rc
}

# kas files: valid against kas's own JSON schema, includes resolvable
# (paths relative to the repository root), this repository listed as a repo.
check_kas_schema() {
	"$OELINT_VENV/bin/python" - kas/*.yml <<-'PY'
	import json, os, sys
	import yaml, jsonschema, kas
	schema = json.load(open(os.path.join(os.path.dirname(kas.__file__), "schema-kas.json")))
	rc = 0
	for f in sys.argv[1:]:
	    try:
	        cfg = yaml.safe_load(open(f))
	        jsonschema.validate(cfg, schema)
	        for inc in cfg.get("header", {}).get("includes", []):
	            if isinstance(inc, str) and not os.path.exists(inc):
	                raise ValueError("include %s not found (paths are relative to the repository root)" % inc)
	        print("%s: valid" % f)
	    except Exception as e:
	        print("%s: %s" % (f, e), file=sys.stderr)
	        rc = 1
	sys.exit(rc)
	PY
}

# oe-core's yocto-check-layer test_readme (scripts/lib/checklayer/cases/common.py)
# as scarthgap and wrynose have it: the first README* of the layer root, and
# any mention of "readme" (case-insensitive) anywhere in it makes the test
# return before its checks; scarthgap looks for the email address with
# re.match, wrynose with re.search.
check_readme() {
	echo "approximation: test_readme's rules re-implemented here (oe-core's scripts/ are not in ../shared/yocto, so yocto-check-layer itself does not run)"
	python3 - "$ROOT" <<-'PY'
	import glob, os, re, sys
	root = sys.argv[1]
	files = glob.glob(os.path.join(root, "[Rr][Ee][Aa][Dd][Mm][Ee]*"))
	if not files:
	    sys.exit("no README file at the layer root")
	readme = sorted(files)[0]
	data = open(readme).read()
	rc = 0
	def check(ok, what):
	    global rc
	    print("%s: %s" % ("ok" if ok else "FAIL", what))
	    rc |= not ok
	check(os.path.basename(readme) == "README.md", "the layer check reads %s" % os.path.basename(readme))
	check(bool(data), "not empty")
	m = re.search("README", data, re.IGNORECASE)
	check(m is None, "never says r-e-a-d-m-e, which skips the remaining checks%s"
	      % ("" if m is None else " (line %d)" % (data[:m.start()].count("\n") + 1)))
	check("maintainer" in data.lower(), "names a maintainer")
	check("patch" in data.lower(), "says how to send patches")
	email = re.compile(r"[^@]+@[^@]+")
	check(bool(email.match(data)), "an email address (scarthgap: re.match)")
	check(bool(email.search(data)), "an email address (wrynose: re.search)")
	for key in ("LAYERDEPENDS_usbperf", "LAYERSERIES_COMPAT_usbperf"):
	    line = [l for l in open(os.path.join(root, "conf/layer.conf")) if l.startswith(key)][0]
	    for word in line.split('"')[1].split():
	        check("`%s`" % word in data, "names %s of %s" % (word, key))
	n = data.count("\n")
	check(n <= 250, "%d lines (at most 250)" % n)
	sys.exit(rc)
	PY
}

# usbperf_git.bb builds SRCREV with the crate list of usbperf-crates.inc, so
# SRCREV's Cargo.lock must give that list, and the tree there must hold what
# usbperf.inc installs from the project (man pages, completions, the trees).
check_git_recipe() {
	local rev lock rc=0 p
	rev=$(sed -n 's/^SRCREV = "\([0-9a-f]*\)"$/\1/p' "$RECIPE_DIR/usbperf_git.bb")
	[ "${#rev}" -eq 40 ] || { echo "usbperf_git.bb: SRCREV is not a full commit hash" >&2; return 1; }
	git -C "$ROOT" cat-file -e "$rev^{commit}" 2>/dev/null ||
		{ echo "SRCREV $rev is not a commit of this repository" >&2; return 1; }
	# Named Cargo.lock: the .inc's "# from" line names the file.
	lock=$(mktemp -d)
	git -C "$ROOT" show "$rev:Cargo.lock" > "$lock/Cargo.lock"
	# The manifests beside it: the workspace's members are in the recipe's sources.
	git -C "$ROOT" ls-tree -r --name-only "$rev" | grep -E '^([^/]+/)?Cargo\.toml$' |
		while read -r m; do
			mkdir -p "$lock/$(dirname "$m")"
			git -C "$ROOT" show "$rev:$m" > "$lock/$m"
		done
	if scripts/maint/update-crates-inc.py --check --lock "$lock/Cargo.lock" >/dev/null; then
		echo "SRCREV $rev: its Cargo.lock gives usbperf-crates.inc"
	else
		echo "SRCREV $rev: its Cargo.lock does not give usbperf-crates.inc (move SRCREV and the .inc together)" >&2; rc=1
	fi
	rm -rf "$lock"
	for p in doc/man/usbperf-matrix.1 completions/usbperf-matrix.bash completions/_usbperf-matrix \
		completions/usbperf-matrix.fish tests/fixtures/qemu/arm64-mixed.umockdev \
		tests/fixtures/qemu/armv7-emmc-board.umockdev profiles/boards LICENSE-MIT LICENSE-APACHE; do
		if git -C "$ROOT" cat-file -e "$rev:$p" 2>/dev/null; then echo "SRCREV has $p"; else echo "SRCREV $rev has no $p" >&2; rc=1; fi
	done
	# Every subcommand the recipe's own scripts and tests call is in SRCREV's binary (its
	# man page is made from the clap definitions): a boot script that calls `power-cut
	# verify` on a build without it would fail at every boot.
	for p in $(cat "$RECIPE_DIR"/files/usbperf-boot "$RECIPE_DIR"/files/*.service lib/oeqa/runtime/cases/*.py 2>/dev/null |
		grep -ohE '(usbperf-matrix|USBPERF_BIN"?) (run|list|tree|bench|show|fleet|upload|power-cut|calibrate)\b' |
		sed 's/^.* /usbperf-matrix-/' | sort -u); do
		if git -C "$ROOT" cat-file -e "$rev:doc/man/$p.1" 2>/dev/null; then
			echo "SRCREV has the subcommand ${p#usbperf-matrix-} the layer calls"
		else
			echo "SRCREV $rev has no subcommand ${p#usbperf-matrix-}, which the layer's scripts call: move SRCREV" >&2; rc=1
		fi
	done
	# And every long option the boot script passes to a subcommand is in that subcommand's
	# page at SRCREV (`power-cut verify --report-dir`): a build without it would refuse the
	# call (exit 2) at every boot.
	python3 - "$ROOT" "$rev" "$RECIPE_DIR/files/usbperf-boot" <<-'PY' || rc=1
	import re, subprocess, sys
	root, rev, script = sys.argv[1:]
	text = open(script).read().replace("\\\n", " ")
	rc = 0
	for line in text.splitlines():
	    m = re.search(r'"\$USBPERF_BIN" (run|upload|list|tree|bench|show|fleet|calibrate|power-cut)( (write|verify))?\b(.*)', line)
	    if not m:
	        continue
	    page = "usbperf-matrix-" + m.group(1) + ("-" + m.group(3) if m.group(3) else "")
	    man = subprocess.run(["git", "-C", root, "show", "%s:doc/man/%s.1" % (rev, page)],
	                         capture_output=True, text=True).stdout.replace("\\-", "-")
	    for opt in sorted(set(re.findall(r"--[a-z][a-z-]+", m.group(4)))):
	        if opt in man:
	            print("SRCREV has %s %s, which usbperf-boot passes" % (page, opt))
	        else:
	            print("SRCREV %s: %s has no %s, which usbperf-boot passes: move SRCREV" % (rev, page, opt), file=sys.stderr)
	            rc = 1
	sys.exit(rc)
	PY
	grep -q '^DEFAULT_PREFERENCE = "-1"$' "$RECIPE_DIR/usbperf_git.bb" ||
		{ echo "usbperf_git.bb must not be the default (DEFAULT_PREFERENCE = \"-1\")" >&2; rc=1; }
	return $rc
}

# The checked-in man pages and completions are what the clap definitions give
# today, and man renders every page without a warning.
check_man_pages() {
	local f out rc=0
	scripts/ci/check-msrv-lock.py --manifest-path doc/gen/Cargo.toml || rc=1
	cargo run --locked --quiet --manifest-path doc/gen/Cargo.toml \
		--target-dir "$CHECK_VENDOR_TARGET_DIR/doc-gen" -- --check || rc=1
	for f in doc/man/*.1; do
		out=$(MANWIDTH=80 man --warnings -l "$f" 2>&1 >/dev/null)
		if [ -n "$out" ] || ! MANWIDTH=80 man -l "$f" 2>/dev/null | grep -q "^NAME"; then
			echo "$f: man -l: ${out:-no NAME section}" >&2; rc=1
		else
			echo "$f: man -l renders it"
		fi
	done
	MANWIDTH=80 man -l doc/man/usbperf-matrix.1 2>/dev/null | grep -q 'EXIT STATUS' ||
		{ echo "usbperf-matrix.1 has no EXIT STATUS section" >&2; rc=1; }
	return $rc
}

# Where do_install puts the man pages and completions, and which package of
# oe-core's FILES (bitbake.conf, bash-completion.bbclass) or the .inc's own
# takes them: usbperf-matrix.1 must end in ${PN}-doc.
check_package_files() {
	echo "approximation: oe-core's FILES for -doc and -*-completion copied here, not read from BitBake"
	python3 - "$ROOT" "$RECIPE_DIR/usbperf.inc" <<-'PY'
	import fnmatch, glob, os, re, sys
	root, inc = sys.argv[1], sys.argv[2]
	text = open(inc).read().replace("\\\n", " ")
	# oe-core's FILES for these packages: bitbake.conf's ${PN}-doc, bash-completion.bbclass
	files = {"${PN}-doc": ["${docdir}", "${mandir}", "${infodir}"],
	         "${PN}-bash-completion": ["${datadir}/bash-completion", "${sysconfdir}/bash_completion.d"]}
	for pkg, paths in re.findall(r'^FILES:(\$\{PN\}-[\w-]+) \+?= "([^"]*)"', text, re.M):
	    files.setdefault(pkg, []).extend(paths.split())
	before = " ".join(re.findall(r'^PACKAGE_BEFORE_PN \+= "([^"]*)"', text, re.M))
	if "bash-completion" in re.search(r"^inherit (.*)$", text, re.M).group(1):
	    before += " ${PN}-bash-completion"
	installed = []
	for src, dest in re.findall(r"install -m 0644 (\$\{S\}/(?:doc|completions)/\S+)\s+(\$\{D\}\S+)", text):
	    matches = sorted(glob.glob(os.path.join(root, src.replace("${S}/", ""))))
	    if not matches:
	        sys.exit("%s: no file in this checkout" % src)
	    for m in matches:
	        d = dest[len("${D}"):]
	        installed.append(d + os.path.basename(m) if d.endswith("/") else d)
	rc = 0
	def package(path):
	    for pkg in before.split():
	        if any(path == p or path.startswith(p + "/") for p in files.get(pkg, [])):
	            return pkg
	    return "${PN}-doc" if any(path.startswith(p + "/") for p in files["${PN}-doc"]) else None
	want = {"${mandir}/man1/usbperf-matrix.1": "${PN}-doc",
	        "${datadir}/bash-completion/completions/usbperf-matrix": "${PN}-bash-completion",
	        "${datadir}/zsh/site-functions/_usbperf-matrix": "${PN}-zsh-completion",
	        "${datadir}/fish/vendor_completions.d/usbperf-matrix.fish": "${PN}-fish-completion"}
	for path in installed:
	    print("%s -> %s" % (path, package(path)))
	    if package(path) is None:
	        print("FAIL: %s is in no package" % path); rc = 1
	for path, pkg in want.items():
	    if path not in installed or package(path) != pkg:
	        print("FAIL: %s is not installed into %s" % (path, pkg)); rc = 1
	man1 = [p for p in installed if p.startswith("${mandir}/man1/")]
	print("%d man pages in ${PN}-doc" % len(man1))
	sys.exit(rc)
	PY
}

check_ptest_logic() {
	local bin="$CHECK_VENDOR_TARGET_DIR/target/debug/usbperf-matrix"
	[ -x "$bin" ] || { echo "no built binary at $bin (vendor-build must run first)" >&2; return 1; }
	scripts/ci/check-ptest.py --logic --matrix "$bin"
}

# The acceptance run: the test binaries cross-built for aarch64 the way
# ptest-cargo builds them (cargo build --tests, the executables of its JSON
# messages), run-ptest under busybox sh, every binary under qemu-aarch64.
check_ptest_aarch64() {
	local out="$CHECK_VENDOR_TARGET_DIR/ptest-aarch64"
	scripts/ci/cross-build.sh --arch aarch64 --ptest "$out" || return 1
	scripts/ci/check-ptest.py --qemu aarch64 --binaries "$out/test-binaries" \
		--matrix "$(cat "$out/usbperf-matrix")"
}

check_oeqa_case() {
	local bin="$CHECK_VENDOR_TARGET_DIR/target/debug/usbperf-matrix"
	[ -x "$bin" ] || { echo "no built binary at $bin (vendor-build must run first)" >&2; return 1; }
	scripts/ci/test-oeqa-case.py --matrix "$bin"
}

check_vendor() {
	echo "approximation: the crate fetcher's unpack and cargo_common's config re-created here; BitBake's own fetch and unpack of the crates is scripts/ci/check-bitbake.sh"
	scripts/ci/check-vendor.py
}

run_check() {
	local name=$1; shift
	note "$name"
	if "$@"; then
		passed+=("$name")
	else
		echo "check-yocto-layer: FAILED: $name" >&2
		failed+=("$name")
	fi
}

# --- main ------------------------------------------------------------------
wanted=${*:-all}
want() { [ "$wanted" = all ] || [[ " $wanted " == *" $1 "* ]]; }

if ! install_deps; then
	echo "check-yocto-layer: FAILED: setup (apt/pip/cargo)" >&2
	echo "check-yocto-layer: 0 passed, 1 failed"
	exit 1
fi

for r in $RELEASES; do
	want "oelint-$r" && run_check "oelint-$r" check_oelint "$r"
done
want recipe-version && run_check recipe-version check_recipe_version
want license-checksums && run_check license-checksums check_license_checksums
want src-uri-files && run_check src-uri-files check_src_uri_files
want crates-inc && run_check crates-inc scripts/maint/update-crates-inc.py --check
want msrv-lock && run_check msrv-lock scripts/ci/check-msrv-lock.py
want vendor-build && run_check vendor-build check_vendor
want feature-sets && run_check feature-sets check_feature_sets
want systemd-verify && run_check systemd-verify check_systemd_verify
want default-config && run_check default-config check_default_config
want shell-syntax && run_check shell-syntax check_shell_syntax
want boot-logic && run_check boot-logic check_boot_logic
want kas-schema && run_check kas-schema check_kas_schema
want readme && run_check readme check_readme
want git-recipe && run_check git-recipe check_git_recipe
want man-pages && run_check man-pages check_man_pages
want package-files && run_check package-files check_package_files
want ptest-logic && run_check ptest-logic check_ptest_logic
want ptest-aarch64 && run_check ptest-aarch64 check_ptest_aarch64
want oeqa-case && run_check oeqa-case check_oeqa_case

echo
if [ ${#failed[@]} -gt 0 ]; then
	echo "check-yocto-layer: failed: ${failed[*]}" >&2
fi
echo "check-yocto-layer: ${#passed[@]} passed, ${#failed[@]} failed"
[ ${#failed[@]} -eq 0 ]
