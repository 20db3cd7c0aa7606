#!/bin/sh
# Installs exactly the Debian 12 packages sandq needs to build, test and run its demo.
# Idempotent: packages already present are not touched, and apt is not called at all
# when nothing is missing. Must run as root (or with SANDQ_NO_INSTALL=1 to only check).
set -eu

PKGS="
build-essential
pkg-config
libhiredis-dev
libuv1-dev
libmsgpack-dev
libseccomp-dev
libsqlite3-dev
libssl-dev
libinih-dev
libjansson-dev
libcriterion-dev
redis-server
redis-tools
python3
python3-msgpack
python3-redis
bubblewrap
"

missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done

if [ -z "$missing" ]; then
	exit 0
fi

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
