#!/bin/sh
# bench/peers/run.sh URL SANDQ_OUT: BullMQ and RQ, two workers each, on the
# Redis at URL (make bench's private one, beside sandq's own workers, which
# sit idle meanwhile), then sandq's figures from SANDQ_OUT (build/bench's
# output in the same run) as ratios to each peer. BullMQ uses Redis
# database 1 and RQ database 2, so neither touches sandq's keys (database
# 0). Each peer script starts and stops its workers by PID. Prints; never
# asserts on timings. PEERS_LATENCY_JOBS and PEERS_THROUGHPUT_JOBS
# (default 500 and 2000) and PEERS_PRODUCERS (4) size the runs.
set -u
here=$(dirname "$0")
url=$1
sandq_out=$2
out=$(mktemp /tmp/sandq-peers-XXXXXX)
trap 'rm -f "$out" "$out.one"' EXIT	# removed however the script ends
args="--latency-jobs ${PEERS_LATENCY_JOBS:-500} --throughput-jobs ${PEERS_THROUGHPUT_JOBS:-2000} --producers ${PEERS_PRODUCERS:-4} --workers 2"
rc=0

echo "peers: the same /bin/true job with no isolation, 2 workers each, same Redis"
# run_peer COMMAND...: runs a peer's bench, its lines but the PEER one
# shown, all kept in $out for the ratios; rc=1 if it fails.
run_peer() {
	"$@" >"$out.one" || rc=1
	grep -v '^PEER' "$out.one"
	cat "$out.one" >>"$out"
}
# shellcheck disable=SC2086
run_peer node "$here/bullmq.mjs" bench "$url" 1 $args
# Debian's python3 (its python3-rq and python3-redis), not a PATH one.
# shellcheck disable=SC2086
run_peer /usr/bin/python3 "$here/rq_bench.py" "$url" 2 $args

# sandq's p50, p99 and jobs/s from bench.c's lines; one ratio line per peer.
awk -v sandq_out="$sandq_out" '
	BEGIN {
		while ((getline line < sandq_out) > 0) {
			n = split(line, f, " ")
			if (line ~ /^sandq: XADD -> result/)
				for (i = 1; i < n; i++) {
					if (f[i] == "p50") p50 = f[i + 1]
					if (f[i] == "p99") p99 = f[i + 1]
				}
			if (line ~ /^sandq: throughput/)
				for (i = 2; i <= n; i++)
					if (f[i] == "jobs/s") tp = f[i - 1]
		}
		if (p50 == "" || tp == "") {
			print "peers: no sandq figures in " sandq_out
			exit 1
		}
		printf "\nsandq against its peers (p50, p99: lower is better; throughput: higher)\n"
		printf "  %-8s %12s %12s %14s\n", "peer", "p50 ratio", "p99 ratio", "throughput"
	}
	$1 == "PEER" {
		printf "  %-8s %11.2fx %11.2fx %13.2fx\n", $2, p50 / $3, p99 / $4, tp / $5
		seen++
	}
	END { if (seen < 2) exit 1 }
' "$out" || rc=1
rm -f "$out" "$out.one"
exit $rc
