#!/bin/sh
# make demo: a private redis-server and sandqd on loopback in a temporary
# state folder, three example jobs through the sandq CLI, then everything
# stopped and removed. Needs root (sandqd maps sandbox uids).
set -u
B=${B:-build}
dir=$(mktemp -d /tmp/sandq-demo-XXXXXX)
redis_pid=""
sandqd_pid=""

cleanup() {
	[ -n "$sandqd_pid" ] && kill -TERM "$sandqd_pid" 2>/dev/null && wait "$sandqd_pid" 2>/dev/null
	[ -n "$redis_pid" ] && kill -TERM "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM

# A free loopback port: ask the kernel for one.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
	--dir "$dir" >"$dir/redis.log" 2>&1 &
redis_pid=$!
i=0
until redis-cli -p "$port" ping >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -gt 500 ] && { echo "redis-server did not start" >&2; exit 1; }
	sleep 0.02
done
url="redis://127.0.0.1:$port"
"$B/sandqd" --redis "$url" --state "$dir/state" --workers 2 2>"$dir/sandqd.log" &
sandqd_pid=$!
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
