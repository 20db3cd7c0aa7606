#!/bin/sh
# Runs every test binary given on the command line, from the repository root.
# Unit tests are pure; integration tests (e2e, containment) start their own
# redis-server and sandqd. Criterion runs each test in its own process;
# --jobs bounds how many run at once (integration tests each start a daemon
# with 2 workers; hosts_test's each start Redis and three hosts, one at a
# time).
#
# A sanitizer report fails the binary even when every assertion passed:
# Criterion does not always turn a leak found at a test process's exit
# into a failure, so the output is searched for the reports' headers.
set -u
failed=""
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for t in "$@"; do
	name=$(basename "$t")
	case "$name" in
	e2e_test|containment_test) jobs=2 ;;
	hosts_test) jobs=1 ;;
	*) jobs=4 ;;
	esac
	echo "== $name"
	"$t" --jobs="$jobs" --short-filename >"$out" 2>&1
	rc=$?
	cat "$out"
	if [ $rc -ne 0 ]; then
		failed="$failed $name"
	elif grep -q -e '^==[0-9]*==ERROR: ' -e 'runtime error: ' "$out"; then
		echo "$name: a sanitizer reported an error (above)" >&2
		failed="$failed $name"
	fi
done
if [ -n "$failed" ]; then
	echo "FAILED:$failed" >&2
	exit 1
fi
echo "all tests passed"
