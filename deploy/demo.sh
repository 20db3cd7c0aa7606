#!/bin/sh
# make demo: a private redis-server and sandqd on loopback in a temporary
# state folder, three example jobs through the sandq CLI, then everything
# stopped and removed. Needs root (sandqd maps sandbox uids).
set -u
. "$(dirname "$0")/private-stack.sh"
stack_start --workers 2
export SANDQ_REDIS="$url"

step() {
	printf '\n\033[1m$ %s\033[0m\n' "$*"
	"$@"
	printf '\033[2m[exit status %s]\033[0m\n' "$?"
}

echo "sandq demo: redis-server on $url, sandqd with 2 workers, state in $dir"
# The first job also waits for sandqd to come up.
step "$B/sandq" --wait-timeout 60 sh 'echo "hello from $(hostname), uid $(id -u)" | tr a-z A-Z; ls /'
step "$B/sandq" sh 'seq 1 1000 | awk "{s += \$1} END {printf \"sum %d\\n\", s}"; printf "b\\na\\nc\\n" | sort | paste -sd,'
step "$B/sandq" python 'import platform, sys; print("python", platform.python_version(), "in", sys.prefix)
print(sum(i * i for i in range(10**6)))'
step "$B/sandq" --timeout 0.5 sh 'echo started; sleep 30; echo never'
step "$B/sandq" --json --timeout 2 --memory 256M sh 'echo to-stdout; echo to-stderr >&2; exit 7'
printf '\n(sandqd log:)\n'
cat "$dir/sandqd.log"
