#!/bin/sh
# Installs the Node packages the interop tests need: agentfs-sdk, pinned in
# tests/interop/package.json and package-lock.json, into
# tests/interop/node_modules, at the lockfile's versions (integrity-checked).
# The SDK's SQLite engine comes as a prebuilt binary in a registry package
# (@tursodatabase/database-linux-x64-gnu): nothing is compiled and no
# install script runs (--ignore-scripts).
#
# `npm install --no-save`, not `npm ci`: the registry we reach has only the
# linux-x64 build of the engine, so the lockfile cannot list the other
# platforms' optional packages and `npm ci` refuses it as out of sync.
# With a lockfile present `npm install` takes its versions and --no-save
# leaves package.json and package-lock.json untouched.
#
# Idempotent: nothing happens when node_modules is newer than the lockfile
# and holds agentfs-sdk. Needs node and npm (deploy/install-deps.sh installs
# them) and the npm registry; no root needed, it writes only inside the
# repository. SANDQ_NO_INSTALL=1 only checks.
set -eu

dir=$(cd "$(dirname "$0")/../tests/interop" && pwd)
mods="$dir/node_modules"

if [ -f "$mods/agentfs-sdk/package.json" ] &&
    [ -f "$mods/.package-lock.json" ] &&
    [ ! "$dir/package-lock.json" -nt "$mods/.package-lock.json" ] &&
    [ ! "$dir/package.json" -nt "$mods/.package-lock.json" ]; then
	exit 0
fi

if [ "${SANDQ_NO_INSTALL:-0}" = 1 ]; then
	echo "install-node-deps: $mods is missing or stale; run" \
	    "sh deploy/install-node-deps.sh" >&2
	exit 1
fi

if ! command -v npm >/dev/null 2>&1; then
	echo "install-node-deps: npm is not installed; run" \
	    "sh deploy/install-deps.sh as root (Debian's nodejs and npm)" >&2
	exit 1
fi

echo "install-node-deps: npm install in tests/interop" >&2
cd "$dir"
npm install --no-save --ignore-scripts --no-audit --no-fund \
    --loglevel=error >/dev/null
