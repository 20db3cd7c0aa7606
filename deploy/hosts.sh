#!/bin/sh
# deploy/hosts.sh - several sandqd hosts and one Redis on this machine, each
# in its own network namespace, so a host can be killed or cut off from
# Redis while the others go on (tests/hosts_test.c, bench/hosts.sh,
# docs/hosts.md). Needs root.
#
#   hosts.sh up NAME N DIR         namespaces NAME-redis, NAME-h1..NAME-hN
#   hosts.sh redis NAME DIR        redis-server (deploy/redis.conf) in NAME-redis
#   hosts.sh sandqd NAME I DIR [--set K=V]...   sandqd in NAME-hI
#   hosts.sh cut NAME I            take host I's link to Redis down
#   hosts.sh heal NAME I           and up again
#   hosts.sh url NAME              print the Redis URL
#   hosts.sh down NAME             stop what was started, delete the namespaces
#
# Network. NAME-redis holds a bridge, br0, at 10.231.X.1/24; each host
# namespace NAME-hI has one veth, eth0 at 10.231.X.(10+I), whose peer hI is
# a port of br0; the root namespace gets a veth NAME-root at 10.231.X.2
# whose peer is a port too, so a test or a client on this machine reaches
# Redis at redis://10.231.X.1:6379 directly. X is derived from NAME (and
# moved on if another run holds that subnet), so two runs with different
# NAMEs do not collide: a run claims X by creating $SANDQ_HOSTS_RUN/subnets/X
# (mkdir: one of two runs starting at once gets it), and `down` frees it. `cut` sets the port hI down on the bridge: host I
# keeps its address and its sockets, and its packets are dropped, as in a
# partition (no reset reaches either side); `heal` sets it up again.
#
# Processes. Each daemon runs under nsenter --net only: it keeps the
# machine's mounts and cgroups (ip netns exec would remount /sys and hide
# the cgroup tree from sandqd). Pids go to DIR/redis.pid and DIR/hI.pid,
# logs to DIR/redis.log and DIR/hI.log; host I's state folder is DIR/hI,
# its host name hI, its sandbox uids start at a base derived from X and I
# (two hosts on one machine must not share uids: RLIMIT_NPROC counts per
# uid). `down` stops only processes whose network namespace is one of
# NAME's, by pid: first those of the pid files (SIGTERM, then SIGKILL after
# 10 s), then any other process still in those namespaces.
#
# State of a run lives in $SANDQ_HOSTS_RUN/NAME (default /run/sandq-hosts):
# its DIR, subnet and host count, so `cut` and `down` need only NAME.
# Binaries come from $SANDQ_BUILD (default: build in this repository).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
run=${SANDQ_HOSTS_RUN:-/run/sandq-hosts}
port=6379

die() {
	echo "hosts.sh: $*" >&2
	exit 1
}

usage() {
	sed -n 's/^#   \(hosts.sh .*\)/usage: \1/p' "$0" >&2
	exit 2
}

# NAME: 1..10 of [a-z0-9], so "NAME-root" fits the 15 bytes of an
# interface name.
check_name() {
	case "$1" in
	'' | *[!a-z0-9]*) die "NAME must be 1..10 characters of [a-z0-9]: '$1'" ;;
	esac
	[ ${#1} -le 10 ] || die "NAME must be at most 10 characters: '$1'"
}

check_index() {
	case "$1" in
	'' | *[!0-9]*) die "host index must be a number: '$1'" ;;
	esac
	if [ "$1" -lt 1 ] || [ "$1" -gt 50 ]; then
		die "host index must be 1..50: $1"
	fi
}

# Reads the run's record: sets net (10.231.X), nhosts and rdir.
load() {
	[ -d "$run/$1" ] || die "no run named '$1' (hosts.sh up $1 N DIR first)"
	net=$(cat "$run/$1/net")
	nhosts=$(cat "$run/$1/n")
	rdir=$(cat "$run/$1/dir")
}

# DIR must be the one given to up: down finds the pid files there.
check_dir() {
	[ -d "$2" ] || die "no folder $2"
	d=$(cd "$2" && pwd)
	[ "$d" = "$rdir" ] || die "DIR for '$1' is $rdir (given to up), not $d"
}

# Whether pid is a live process in network namespace ns.
in_ns() {
	[ -e "/run/netns/$2" ] && [ -e "/proc/$1/ns/net" ] || return 1
	[ "$(stat -L -c %i "/proc/$1/ns/net" 2>/dev/null)" = \
	    "$(stat -L -c %i "/run/netns/$2")" ]
}

# Waits up to $2 tenths of a second for pid $1 to be gone.
wait_gone() {
	t=0
	while kill -0 "$1" 2>/dev/null; do
		# A zombie is gone for our purpose: its parent reaps it.
		case "$(sed -n 's/^State:[[:space:]]*\(.\).*/\1/p' "/proc/$1/status" 2>/dev/null)" in
		Z | '') return 0 ;;
		esac
		t=$((t + 1))
		[ $t -le "$2" ] || return 1
		sleep 0.1
	done
}

redis_cli() {
	nsenter --net="/run/netns/$name-redis" redis-cli -h 127.0.0.1 -p "$port" "$@"
}

cmd_up() {
	[ $# -eq 3 ] || usage
	name=$1 n=$2 dir=$3
	check_name "$name"
	case "$n" in '' | *[!0-9]*) die "N must be a number: '$n'" ;; esac
	if [ "$n" -lt 1 ] || [ "$n" -gt 50 ]; then
		die "N must be 1..50: $n"
	fi
	[ "$(id -u)" -eq 0 ] || die "needs root (network namespaces)"
	mkdir -p "$run" "$dir"
	dir=$(cd "$dir" && pwd)
	mkdir "$run/$name" 2>/dev/null || die "a run named '$name' exists (hosts.sh down $name)"
	# Nothing of that name may exist: a failed up deletes NAME-* again.
	for f in /run/netns/"$name"-* /sys/class/net/"$name"-root; do
		if [ -e "$f" ]; then
			rmdir "$run/$name"
			die "$f exists: left by another run? (hosts.sh down $name)"
		fi
	done
	# From here on a failure undoes what was made.
	# shellcheck disable=SC2154 # rc is assigned in the trap itself
	trap 'rc=$?; if [ $rc -ne 0 ]; then net_delete "$name" "$n"; subnet_free "$name"; rm -rf "$run/$name"; fi' EXIT

	# A /24 derived from NAME; the next one if a route or run has it. The
	# claim is a mkdir, so two runs checking at once cannot both take it.
	x=$(( $(printf '%s' "$name" | cksum | cut -d' ' -f1) % 200 + 20 ))
	tries=0
	mkdir -p "$run/subnets"
	while ip -4 route show | grep -q "^10\.231\.$x\.0/24 " ||
	    grep -qx "10.231.$x" "$run"/*/net 2>/dev/null ||
	    ! mkdir "$run/subnets/$x" 2>/dev/null; do
		x=$(( (x - 20 + 1) % 200 + 20 ))
		tries=$((tries + 1))
		[ $tries -lt 200 ] || die "no free subnet in 10.231.20-219.0/24"
	done
	net=10.231.$x
	echo "$net" >"$run/$name/net"
	echo "$n" >"$run/$name/n"
	echo "$dir" >"$run/$name/dir"

	ip netns add "$name-redis"
	ip -n "$name-redis" link set lo up
	ip -n "$name-redis" link add br0 type bridge
	ip -n "$name-redis" addr add "$net.1/24" dev br0
	ip -n "$name-redis" link set br0 up

	ip link add "$name-root" type veth peer name root netns "$name-redis"
	ip addr add "$net.2/24" dev "$name-root"
	ip link set "$name-root" up
	ip -n "$name-redis" link set root master br0 up

	i=1
	while [ $i -le "$n" ]; do
		ip netns add "$name-h$i"
		ip -n "$name-h$i" link set lo up
		ip -n "$name-h$i" link add eth0 type veth peer name "h$i" netns "$name-redis"
		ip -n "$name-h$i" addr add "$net.$((10 + i))/24" dev eth0
		ip -n "$name-h$i" link set eth0 up
		ip -n "$name-redis" link set "h$i" master br0 up
		i=$((i + 1))
	done
	echo "redis://$net.1:$port" >"$dir/redis.url"
	trap - EXIT
	echo "redis://$net.1:$port"
}

# Frees the subnet run $1 claimed (if its record names one).
subnet_free() {
	[ -f "$run/$1/net" ] || return 0
	rmdir "$run/subnets/$(sed 's/.*\.//' "$run/$1/net")" 2>/dev/null || true
}

# Deletes the namespaces and the root veth of a run (what exists of them).
net_delete() {
	i=1
	while [ $i -le "$2" ]; do
		ip netns del "$1-h$i" 2>/dev/null || true
		i=$((i + 1))
	done
	ip link del "$1-root" 2>/dev/null || true
	ip netns del "$1-redis" 2>/dev/null || true
}

cmd_redis() {
	[ $# -eq 2 ] || usage
	name=$1
	check_name "$name"
	load "$name"
	check_dir "$name" "$2"
	dir=$rdir
	if [ -f "$dir/redis.pid" ] && in_ns "$(cat "$dir/redis.pid")" "$name-redis"; then
		die "redis-server of '$name' runs already (pid $(cat "$dir/redis.pid"))"
	fi
	mkdir -p "$dir/redis"
	# deploy/redis.conf with the harness's overrides (the last value of a
	# directive wins). Its dir line goes: Redis changes into it while
	# reading the file, and /var/lib/redis need not exist here.
	{
		sed '/^dir /d' "$repo/deploy/redis.conf"
		cat <<-EOF

		# hosts.sh overrides: private namespace, foreground, this run's files.
		port $port
		bind $net.1 127.0.0.1
		protected-mode no
		daemonize no
		supervised no
		dir $dir/redis
		pidfile $dir/redis.pid
		maxmemory 1gb
		EOF
	} >"$dir/redis.conf"
	nsenter --net="/run/netns/$name-redis" redis-server "$dir/redis.conf" \
	    </dev/null >>"$dir/redis.log" 2>&1 &
	pid=$!
	echo "$pid" >"$dir/redis.pid"
	# Ready when it answers and has loaded its AOF.
	t=0
	until [ "$(redis_cli ping 2>/dev/null)" = PONG ] &&
	    redis_cli info persistence 2>/dev/null | grep -q '^loading:0'; do
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -n 20 "$dir/redis.log" >&2
			die "redis-server exited (log above: $dir/redis.log)"
		fi
		t=$((t + 1))
		if [ $t -gt 300 ]; then
			tail -n 20 "$dir/redis.log" >&2
			die "redis-server (pid $pid) did not answer in 30 s"
		fi
		sleep 0.1
	done
	echo "$pid"
}

cmd_sandqd() {
	[ $# -ge 3 ] || usage
	name=$1 i=$2
	check_name "$name"
	check_index "$i"
	load "$name"
	check_dir "$name" "$3"
	shift 3
	dir=$rdir
	[ "$i" -le "$nhosts" ] || die "'$name' has hosts 1..$nhosts, not $i"
	b=${SANDQ_BUILD:-$repo/build}
	case "$b" in /*) ;; *) b=$(pwd)/$b ;; esac
	[ -x "$b/sandqd" ] || die "no $b/sandqd (make, or set SANDQ_BUILD)"
	if [ -f "$dir/h$i.pid" ] && in_ns "$(cat "$dir/h$i.pid")" "$name-h$i"; then
		die "sandqd h$i of '$name' runs already (pid $(cat "$dir/h$i.pid"))"
	fi
	mkdir -p "$dir/h$i"
	x=${net##*.}
	nsenter --net="/run/netns/$name-h$i" "$b/sandqd" --redis "redis://$net.1:$port" \
	    --state "$dir/h$i" --set "host=h$i" \
	    --set "sandbox_uid_base=$((1000000 + x * 10000 + i * 100))" "$@" \
	    </dev/null >>"$dir/h$i.log" 2>&1 &
	pid=$!
	echo "$pid" >"$dir/h$i.pid"
	# Up once its heartbeat (every 2 s, once connected) names its pid.
	# Without a running Redis there is nothing to wait for.
	if [ -f "$dir/redis.pid" ] && in_ns "$(cat "$dir/redis.pid")" "$name-redis"; then
		t=0
		until redis_cli --raw hget sandq:hosts "h$i" 2>/dev/null |
		    grep -q "\"pid\":${pid}[,}]"; do
			if ! kill -0 "$pid" 2>/dev/null; then
				tail -n 20 "$dir/h$i.log" >&2
				die "sandqd h$i exited (log above: $dir/h$i.log)"
			fi
			t=$((t + 1))
			if [ $t -gt 600 ]; then
				tail -n 20 "$dir/h$i.log" >&2
				die "sandqd h$i (pid $pid) not up after 60 s; left running"
			fi
			sleep 0.1
		done
	fi
	echo "$pid"
}

cmd_link() {
	[ $# -eq 3 ] || usage
	name=$2 i=$3
	check_name "$name"
	check_index "$i"
	load "$name"
	[ "$i" -le "$nhosts" ] || die "'$name' has hosts 1..$nhosts, not $i"
	ip -n "$name-redis" link set "h$i" "$1"
}

cmd_url() {
	[ $# -eq 1 ] || usage
	check_name "$1"
	load "$1"
	echo "redis://$net.1:$port"
}

# Stops the process of pid file $1 if it runs in namespace $2.
stop_pidfile() {
	[ -f "$1" ] || return 0
	p=$(cat "$1")
	if in_ns "$p" "$2"; then
		kill -TERM "$p" 2>/dev/null || true
		if ! wait_gone "$p" 100; then
			echo "hosts.sh: pid $p ($1) still running after 10 s: SIGKILL" >&2
			kill -KILL "$p" 2>/dev/null || true
			wait_gone "$p" 50 || echo "hosts.sh: pid $p would not die" >&2
		fi
	fi
	rm -f "$1"
}

# Kills, by pid, whatever is still in namespace $1.
sweep_ns() {
	[ -e "/run/netns/$1" ] || return 0
	for p in $(ip netns pids "$1" 2>/dev/null); do
		echo "hosts.sh: pid $p left in $1: SIGKILL" >&2
		kill -KILL "$p" 2>/dev/null || true
	done
	for p in $(ip netns pids "$1" 2>/dev/null); do
		wait_gone "$p" 50 || echo "hosts.sh: pid $p in $1 would not die" >&2
	done
}

cmd_down() {
	[ $# -eq 1 ] || usage
	name=$1
	check_name "$name"
	if [ ! -d "$run/$name" ]; then
		# No record: delete whatever namespaces carry the name.
		set -- /run/netns/"$name"-*
		[ -e "$1" ] || die "no run named '$name'"
		nhosts=50 rdir=""
	else
		load "$name"
	fi
	# Hosts first, so they stop while Redis can still take their results.
	i=1
	while [ $i -le "$nhosts" ]; do
		[ -n "$rdir" ] && stop_pidfile "$rdir/h$i.pid" "$name-h$i"
		sweep_ns "$name-h$i"
		i=$((i + 1))
	done
	[ -n "$rdir" ] && stop_pidfile "$rdir/redis.pid" "$name-redis"
	sweep_ns "$name-redis"
	net_delete "$name" "$nhosts"
	subnet_free "$name"
	rm -rf "${run:?}/$name"
}

[ $# -ge 1 ] || usage
verb=$1
shift
case "$verb" in
up) cmd_up "$@" ;;
redis) cmd_redis "$@" ;;
sandqd) cmd_sandqd "$@" ;;
cut) cmd_link down "$@" ;;
heal) cmd_link up "$@" ;;
url) cmd_url "$@" ;;
down) cmd_down "$@" ;;
*) usage ;;
esac
