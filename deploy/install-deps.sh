#!/bin/sh
# Installs exactly the Debian 12 packages sandq needs to build, test and run its demo,
# then the interop tests' Node packages (deploy/install-node-deps.sh).
# Idempotent: packages already present are not touched, and apt is not called at all
# when nothing is missing. Must run as root (or with SANDQ_NO_INSTALL=1 to only check).
set -eu

here=$(dirname "$0")

PKGS="
build-essential
pkg-config
libhiredis-dev
libuv1-dev
libhttp-parser-dev
curl
git
openssl
libmsgpack-dev
libseccomp-dev
libsqlite3-dev
libssl-dev
libinih-dev
libjansson-dev
libpcre2-dev
libh2o-dev
libwslay-dev
libcurl4-openssl-dev
libcriterion-dev
libsystemd-dev
redis-server
redis-tools
python3
python3-msgpack
python3-redis
python3-rq
python3-pip
python3-setuptools
python3-wheel
python3-mypy
python3-typeshed
bubblewrap
iproute2
sqlite3
libarchive-dev
skopeo
docker-registry
prometheus
busybox-static
mmdebstrap
scdoc
mandoc
chromium
"

# Packages only some targets need (make lint: cppcheck), named by the caller.
PKGS="$PKGS ${SANDQ_EXTRA_PKGS:-}"

# node and npm run the interop tests (agentfs-sdk). Checked as commands, not
# packages: a NodeSource nodejs ships its own npm and conflicts with Debian's
# npm package, so only a machine without them gets Debian's nodejs and npm.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	PKGS="$PKGS nodejs npm"
fi

missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done

if [ -n "$missing" ]; then
	if [ "${SANDQ_NO_INSTALL:-0}" = 1 ]; then
		echo "install-deps: missing packages:$missing" >&2
		exit 1
	fi
	if [ "$(id -u)" != 0 ]; then
		echo "install-deps: missing packages:$missing; run as root to install them" >&2
		exit 1
	fi
	echo "install-deps: installing$missing" >&2
	export DEBIAN_FRONTEND=noninteractive
	# The package lists on a fresh machine may be empty or stale: refresh them once.
	apt-get update -qq
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# agentfs-sdk for tests/interop_test.c (no-op when already installed).
sh "$here/install-node-deps.sh"
