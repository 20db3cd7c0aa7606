#!/bin/sh
# Runs every test binary given on the command line, from the repository root.
# Unit tests are pure; integration tests (e2e) start their own redis-server
# and sandqd. Criterion runs each test in its own process; --jobs bounds how
# many run at once (integration tests each start a daemon with 2 workers).
set -u
failed=""
for t in "$@"; do
	name=$(basename "$t")
	case "$name" in
	e2e_test|containment_test) jobs=2 ;;
	*) jobs=4 ;;
	esac
	echo "== $name"
	if ! "$t" --jobs="$jobs" --short-filename; then
		failed="$failed $name"
	fi
done
if [ -n "$failed" ]; then
	echo "FAILED:$failed" >&2
	exit 1
fi
echo "all tests passed"
