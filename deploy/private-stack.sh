# Sourced by deploy/demo.sh and bench/run.sh: a private redis-server and
# sandqd on a free loopback port in a temporary folder, stopped and removed
# on exit. Sets $dir and $url; stack_start takes extra sandqd arguments.
B=${B:-build}
dir=$(mktemp -d /tmp/sandq-XXXXXX)
redis_pid=""
sandqd_pid=""

stack_stop() {
	[ -n "$sandqd_pid" ] && kill -TERM "$sandqd_pid" 2>/dev/null && wait "$sandqd_pid" 2>/dev/null
	[ -n "$redis_pid" ] && kill -TERM "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
	rm -rf "$dir"
}
trap stack_stop EXIT INT TERM

stack_start() {
	# A free loopback port: ask the kernel for one.
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$dir" >"$dir/redis.log" 2>&1 &
	redis_pid=$!
	i=0
	until redis-cli -p "$port" ping >/dev/null 2>&1; do
		i=$((i + 1))
		if [ $i -gt 500 ]; then
			echo "redis-server did not start:" >&2
			cat "$dir/redis.log" >&2
			exit 1
		fi
		sleep 0.02
	done
	url="redis://127.0.0.1:$port"
	"$B/sandqd" --redis "$url" --state "$dir/state" "$@" 2>"$dir/sandqd.log" &
	sandqd_pid=$!
}
