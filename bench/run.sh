#!/bin/sh
# make bench: a private redis-server and sandqd (one worker per CPU) on a
# free loopback port in a temporary folder, the benchmark against them, then
# everything stopped and removed. Extra arguments go to the bench binary.
set -u
B=${B:-build}
dir=$(mktemp -d /tmp/sandq-bench-XXXXXX)
redis_pid=""
sandqd_pid=""
cleanup() {
	[ -n "$sandqd_pid" ] && kill -TERM "$sandqd_pid" 2>/dev/null && wait "$sandqd_pid" 2>/dev/null
	[ -n "$redis_pid" ] && kill -TERM "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
	--dir "$dir" >"$dir/redis.log" 2>&1 &
redis_pid=$!
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.02; done
"$B/sandqd" --redis "redis://127.0.0.1:$port" --state "$dir/state" ${SANDQ_BENCH_WORKERS:+--workers $SANDQ_BENCH_WORKERS} \
	--log-level warn 2>"$dir/sandqd.log" &
sandqd_pid=$!
echo "sandq bench on $(nproc) CPUs, $(uname -r)"
"$B/bench" "redis://127.0.0.1:$port" "$@"
rc=$?
[ $rc -ne 0 ] && cat "$dir/sandqd.log"
exit $rc
