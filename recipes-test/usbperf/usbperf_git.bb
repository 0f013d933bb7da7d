# usbperf built from its upstream git repository at SRCREV, for builds that
# take meta-usbperf as it is and want a real download location: devtool
# upgrade, the upstream version check (checkpkg) and the SPDX/SBOM download
# location work with it. Not the default: select it with
#   PREFERRED_VERSION_usbperf = "0.1.0+git"
# (docs/yocto.md, "Which recipe").
#
# SRCREV must be a commit whose Cargo.lock is the one usbperf-crates.inc
# lists (shared with usbperf_0.1.0.bb) and whose binary has every subcommand
# the layer's boot script and services call (power-cut verify among them);
# scripts/ci/check-yocto-layer.sh git-recipe checks both. It lags main by the commits
# since it was last moved: a recipe cannot name the commit that holds it.

# oe-core appends the revision to "+git" (no SRCPV since 4.3).
PV = "0.1.0+git"

# destsuffix=${BP}: the checkout is the default S of both releases.
SRC_URI = "git://github.com/usbperf/meta-usbperf.git;protocol=https;branch=main;destsuffix=${BP}"
SRCREV = "d490e41762bbf0a261b66d5c9b349cea43ab9790"
# Releases are tagged v0.1.0, v0.2.0, ...
UPSTREAM_CHECK_GITTAGREGEX = "v(?P<pver>\d+(\.\d+)+)"

# The checkout recipe (usbperf_0.1.0.bb) stays the default.
DEFAULT_PREFERENCE = "-1"

require usbperf.inc

# Every crate of Cargo.lock; regenerate with scripts/maint/update-crates-inc.py
# (same output as "bitbake -c update_crates usbperf"). One list for both
# recipes: usbperf_git.bb's SRCREV has this checkout's Cargo.lock
# (scripts/ci/check-yocto-layer.sh git-recipe). Required here, in the .bb, where ${BPN}
# is this recipe's name (in usbperf.inc it would not be).
require ${BPN}-crates.inc
