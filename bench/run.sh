#!/bin/sh
# make bench: a private redis-server and sandqd (one worker per CPU) on a
# free loopback port in a temporary folder, the benchmark against them, then
# everything stopped and removed. Extra arguments go to the bench binary;
# bench/peers/run.sh (BullMQ and RQ, the same job unisolated, with sandq's
# figures as ratios to theirs) runs next on the same Redis; sandbox-bench
# (persistent sandboxes) and gateway-bench (sandq-gateway beside the Redis
# path; it starts its own gateways) run after it on the same stack;
# then, the stack stopped, memory-bench (resident memory of sandqd and its
# workers over 10,000 jobs, Redis's per job) on a fresh stack of its own,
# so that its idle figures are a just-started sandqd's; then image-bench
# (jobs on OCI images), which starts its own docker-registry, redis-server
# and sandqd.
set -u
. "$(dirname "$0")/../deploy/private-stack.sh"
stack_start --log-level warn ${SANDQ_BENCH_WORKERS:+--workers $SANDQ_BENCH_WORKERS}
echo "sandq bench on $(nproc) CPUs, $(uname -r)"
{ "$B/bench" "$url" "$@"; echo $? >"$dir/bench.rc"; } | tee "$dir/bench.out"
rc=$(cat "$dir/bench.rc")
echo
# BullMQ and RQ on the same Redis; sandq's figures above as ratios to theirs.
sh "$(dirname "$0")/peers/run.sh" "$url" "$dir/bench.out" || rc=1
echo
"$B/sandbox-bench" "$url" || rc=1
echo
SANDQ_BUILD="$B" "$B/gateway-bench" "$url" || rc=1
[ $rc -ne 0 ] && cat "$dir/sandqd.log"
stack_stop
redis_pid="" sandqd_pid=""
echo
dir=$(mktemp -d /tmp/sandq-XXXXXX)
stack_start --log-level warn ${SANDQ_BENCH_WORKERS:+--workers $SANDQ_BENCH_WORKERS}
"$B/memory-bench" "$url" "$sandqd_pid" || { rc=1; cat "$dir/sandqd.log"; }
stack_stop
redis_pid="" sandqd_pid=""
echo
SANDQ_BUILD="$B" "$B/image-bench" || rc=1
exit $rc
