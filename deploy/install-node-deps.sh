#!/bin/sh
# Installs the Node packages the tests need, each folder at its lockfile's
# versions (integrity-checked), into its own node_modules:
#
#   tests/interop       agentfs-sdk, for tests/interop_test.c
#   tests/mcp           @modelcontextprotocol/sdk (a devDependency: the
#                       official MCP client), for tests/mcp/mcp.test.mjs
#   clients/typescript  typescript (the compiler) and yaml (the parser of
#                       docs/openapi.yaml in test/openapi.test.mjs),
#                       devDependencies of the TypeScript client; the
#                       client itself has no runtime dependency
#   tests/dashboard     puppeteer-core, for tests/dashboard/dashboard.test.mjs
#                       (drives Debian's chromium; it downloads no browser)
#   bench/peers         bullmq, for bench/peers/bullmq.mjs (make bench's
#                       comparison with an unisolated Node queue)
#
# agentfs-sdk's SQLite engine comes as a prebuilt binary in a registry
# package (@tursodatabase/database-linux-x64-gnu): nothing is compiled and
# no install script runs (--ignore-scripts).
#
# `npm install --no-save`, not `npm ci`: the registry we reach has only the
# linux-x64 build of the engine, so the interop lockfile cannot list the
# other platforms' optional packages and `npm ci` refuses it as out of sync.
# With a lockfile present `npm install` takes its versions and --no-save
# leaves package.json and package-lock.json untouched. npm's cache
# (~/.npm) serves a package it already holds.
#
# Idempotent: nothing happens for a folder whose node_modules is newer than
# its lockfile and holds the packages. Needs node and npm
# (deploy/install-deps.sh installs them) and the npm registry; no root
# needed, it writes only inside the repository. SANDQ_NO_INSTALL=1 only
# checks.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)

# all_there MODS PACKAGE...: whether MODS holds every PACKAGE.
all_there() {
	m=$1
	shift
	for p in "$@"; do
		[ -f "$m/$p/package.json" ] || return 1
	done
}

# install DIR PACKAGE...: npm install in DIR unless DIR/node_modules holds
# every PACKAGE and is current.
install() {
	dir="$root/$1"
	mods="$dir/node_modules"
	shift
	if all_there "$mods" "$@" &&
	    [ -f "$mods/.package-lock.json" ] &&
	    [ ! "$dir/package-lock.json" -nt "$mods/.package-lock.json" ] &&
	    [ ! "$dir/package.json" -nt "$mods/.package-lock.json" ]; then
		return 0
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

	echo "install-node-deps: npm install in ${dir#"$root"/}" >&2
	(cd "$dir" && npm install --no-save --ignore-scripts --no-audit --no-fund \
	    --loglevel=error >/dev/null)
}

install tests/interop agentfs-sdk
install clients/typescript typescript yaml
install tests/mcp @modelcontextprotocol/sdk
install tests/dashboard puppeteer-core
install bench/peers bullmq
