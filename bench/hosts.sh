#!/bin/sh
# bench/hosts.sh (make bench-hosts): throughput of one batch of trivial jobs
# served by 1, 2 and then 3 sandqd hosts sharing one Redis, each host in its
# own network namespace (deploy/hosts.sh), printed as jobs/s and as a ratio
# to one host. Needs root. Numbers, not assertions.
#
# Each run starts from nothing: a fresh Redis, N hosts with W workers each,
# a warm-up batch, then the batch timed by build/hosts-load (C client
# threads submit their share, then wait for each result) from the first
# submission to the last result. All hosts share this machine's CPUs, so
# adding hosts adds no CPU: on a small machine expect the ratio to stay
# near 1 (the figure measures what coordination through Redis costs).
#
# Environment: SANDQ_BUILD (default build), SANDQ_BENCH_JOBS (2000),
# SANDQ_BENCH_WORKERS (2 per host), SANDQ_BENCH_CLIENTS (4),
# SANDQ_BENCH_HOSTS (the host counts to run, default "1 2 3").
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
hosts_sh="$repo/deploy/hosts.sh"
B=${SANDQ_BUILD:-$repo/build}
case "$B" in /*) ;; *) B=$(pwd)/$B ;; esac
export SANDQ_BUILD="$B"
jobs=${SANDQ_BENCH_JOBS:-2000}
workers=${SANDQ_BENCH_WORKERS:-2}
clients=${SANDQ_BENCH_CLIENTS:-4}
counts=${SANDQ_BENCH_HOSTS:-1 2 3}

[ "$(id -u)" -eq 0 ] || { echo "bench/hosts.sh: needs root (network namespaces)" >&2; exit 1; }
for f in sandqd sandq-worker hosts-load; do
	[ -x "$B/$f" ] || { echo "bench/hosts.sh: no $B/$f (make bench-hosts)" >&2; exit 1; }
done

name=hb$$
dir=$(mktemp -d /tmp/sandq-bench-hosts-XXXXXX)
up=""
cleanup() {
	if [ -n "$up" ]; then
		sh "$hosts_sh" down "$name" >/dev/null || true
	fi
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ncpu=$(nproc)
echo "sandq bench-hosts: $jobs jobs (sh \"echo I\"), $workers workers per host," \
    "$clients clients, one Redis; $ncpu CPUs shared by every host"
if [ "$ncpu" -le 2 ]; then
	echo "(on $ncpu CPUs more hosts bring no more CPU: expect little or no scaling)"
fi
printf '%-6s %-8s %10s %10s %9s\n' hosts workers jobs/s "vs 1 host" seconds

base=""
for n in $counts; do
	d=$dir/n$n
	mkdir -p "$d"
	sh "$hosts_sh" up "$name" "$n" "$d" >/dev/null
	up=1
	sh "$hosts_sh" redis "$name" "$d" >/dev/null
	i=1
	while [ $i -le "$n" ]; do
		sh "$hosts_sh" sandqd "$name" $i "$d" --set "workers=$workers" \
		    --log-level warn >/dev/null
		i=$((i + 1))
	done
	url=$(cat "$d/redis.url")
	# Warm-up: page in the binaries and the image on every host.
	"$B/hosts-load" "$url" --jobs $((20 * n)) --clients "$clients" >/dev/null
	if ! out=$("$B/hosts-load" "$url" --jobs "$jobs" --clients "$clients"); then
		echo "bench/hosts.sh: $n host(s): some jobs failed: $out" >&2
		tail -n 5 "$d"/h*.log >&2
		exit 1
	fi
	sh "$hosts_sh" down "$name" >/dev/null
	up=""
	rate=$(echo "$out" | sed -n 's/.* jobs_per_s \([0-9.]*\).*/\1/p')
	secs=$(echo "$out" | sed -n 's/.* seconds \([0-9.]*\).*/\1/p')
	[ -n "$base" ] || base=$rate
	ratio=$(awk -v r="$rate" -v b="$base" 'BEGIN { printf "%.2fx", r / b }')
	printf '%-6s %-8s %10s %10s %9s\n' "$n" $((n * workers)) "$rate" "$ratio" "$secs"
done
