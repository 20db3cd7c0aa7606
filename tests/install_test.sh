#!/bin/sh
# install_test.sh - `make install` and `make uninstall` into a scratch
# DESTDIR, checked (issue 18, item 4). The Makefile wraps it as
# build/tests/install_test, run from the repository root like python_test.
#
# The build for PREFIX=/usr is made in its own folder (B=), since the
# worker's path is compiled into sandqd and the main build/ must keep its
# own. It checks that every file expected is there with its mode, that the
# installed sandqd names the installed worker, the man pages render with
# mandoc without a warning (sandqd(8), sandq-gateway(8) and sandq.conf(5)
# among them, each naming every option), --help prints sandq(1), sandqd(8)
# and sandq-gateway(8), the pkg-config file's prefix, the systemd units'
# paths, the bash completion sourced without error, the Python client
# installed by pip from clients/python offline, and that uninstall
# leaves no file behind.
set -eu
unset MAKEFLAGS MAKELEVEL MFLAGS
tmp=$(mktemp -d /tmp/sandq-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/root
fail=0

# bad MESSAGE: a failed check, named; the test goes on to list them all.
bad()
{
	echo "install_test: $*" >&2
	fail=1
}

# mode FILE MODE: FILE exists, a regular file with octal MODE.
mode()
{
	if [ ! -f "$dest$1" ]; then
		bad "missing $1"
	elif [ "$(stat -c %a "$dest$1")" != "$2" ]; then
		bad "$1 has mode $(stat -c %a "$dest$1"), not $2"
	fi
}

make -s -j2 B="$tmp/build" DESTDIR="$dest" PREFIX=/usr install >"$tmp/log" 2>&1 ||
	{ cat "$tmp/log" >&2; echo "install_test: make install failed" >&2; exit 1; }

for f in /usr/bin/sandq /usr/bin/sandq-gateway /usr/sbin/sandqd \
    /usr/libexec/sandq/sandq-worker /usr/libexec/sandq/sandq-unpack; do
	mode "$f" 755
done
for f in /etc/sandq/sandq.conf.example /usr/include/sandq.h \
    /usr/lib/libsandq.a /usr/lib/pkgconfig/sandq.pc \
    /usr/share/bash-completion/completions/sandq /usr/lib/tmpfiles.d/sandq.conf \
    /usr/share/sandq/dashboard/index.html /usr/share/sandq/dashboard/app.js; do
	mode "$f" 644
done
for u in deploy/*.service; do
	mode "/usr/lib/systemd/system/${u#deploy/}" 644
done

# Every page of docs/man installed, and readable: mandoc parses it with no
# error (scdoc's empty paragraphs are warnings, so -W error).
# sandq.conf(5) is made from config/sandq.conf.example (docs/man/conf2scd.py).
for page in $(cd docs/man && ls -- *.scd | sed 's/\.scd$//') sandq.conf.5; do
	f=/usr/share/man/man${page##*.}/$page
	mode "$f" 644
	mandoc -T lint -W error "$dest$f" >&2 || bad "mandoc finds errors in $f"
	mandoc -T ascii "$dest$f" | sed 's/.\x08//g' | grep -q '^NAME' || bad "$f has no NAME"
done
# sandq --help is sandq(1) as man shows it.
mandoc -T ascii -O width=78 "$dest/usr/share/man/man1/sandq.1" | sed 's/.\x08//g' |
    head -n 5 | sed 's/ *$//' >"$tmp/man"
"$dest/usr/bin/sandq" --help | head -n 5 | cmp -s - "$tmp/man" || bad "sandq --help is not sandq(1)"
# The daemons' --help is their whole page as man shows it, footer aside.
for d in sbin/sandqd:man8/sandqd.8 bin/sandq-gateway:man8/sandq-gateway.8; do
	mandoc -T ascii -O width=78 "$dest/usr/share/man/${d#*:}" | sed 's/.\x08//g' |
	    expand | sed 's/ *$//' | head -n -2 >"$tmp/man"
	"$dest/usr/${d%%:*}" --help | cmp -s - "$tmp/man" ||
		bad "${d%%:*} --help is not ${d#*:}"
done
# Each option of the daemons' getopt tables is on its page, and each key of
# the example's sections on sandq.conf(5).
for d in dispatcher/main.c:man8/sandqd.8 gateway/main.c:man8/sandq-gateway.8; do
	mandoc -T ascii "$dest/usr/share/man/${d#*:}" | sed 's/.\x08//g' >"$tmp/page"
	for o in $(sed -n 's/^[[:space:]]*{ "\([a-z-]*\)", [a-z_]*_argument,.*/\1/p' "${d%%:*}"); do
		grep -q -- "--$o" "$tmp/page" || bad "${d#*:} does not name --$o"
	done
done
mandoc -T ascii "$dest/usr/share/man/man5/sandq.conf.5" | sed 's/.\x08//g' >"$tmp/page"
for k in $(sed -n 's/^\([a-z_]*\) =.*/\1/p' config/sandq.conf.example); do
	grep -q "^       $k =" "$tmp/page" || bad "sandq.conf(5) has no $k"
done

# sandqd starts the worker it was built to find.
grep -q /usr/libexec/sandq/sandq-worker "$dest/usr/sbin/sandqd" ||
	bad "sandqd does not name /usr/libexec/sandq/sandq-worker"
# The units start what was installed, not /usr/local's.
if grep -n /usr/local "$dest"/usr/lib/systemd/system/*.service >&2; then
	bad "a unit names /usr/local"
fi
grep -q '^ExecStart=/usr/bin/sandq-gateway ' \
    "$dest/usr/lib/systemd/system/sandq-gateway.service" ||
	bad "sandq-gateway.service does not start /usr/bin/sandq-gateway"

# The pkg-config file names the prefix, and compiles a client against the
# installed header and library.
PKG_CONFIG_LIBDIR=$dest/usr/lib/pkgconfig \
    pkg-config --variable=prefix sandq >"$tmp/prefix" || bad "pkg-config sandq failed"
[ "$(cat "$tmp/prefix")" = /usr ] || bad "sandq.pc's prefix is $(cat "$tmp/prefix"), not /usr"
printf '%s\n' '#include <sandq.h>' 'int main(void) { return 0; }' >"$tmp/c.c"
# shellcheck disable=SC2046
cc -o "$tmp/c" "$tmp/c.c" $(PKG_CONFIG_SYSROOT_DIR=$dest \
    PKG_CONFIG_LIBDIR=$dest/usr/lib/pkgconfig pkg-config --cflags --libs sandq) ||
	bad "a client does not build with pkg-config sandq"

# The completion loads in a fresh bash and completes a verb.
out=$(bash -c '. "$1" && COMP_WORDS=(sandq sandb) COMP_CWORD=1 && _sandq &&
    echo "${COMPREPLY[*]}"' sh "$dest/usr/share/bash-completion/completions/sandq" 2>&1) ||
	bad "the completion does not load: $out"
[ "$out" = sandbox ] || bad "the completion gave '$out' for sandb"

# The Python client installs from the tree, offline (Debian's pip and setuptools).
/usr/bin/python3 -m pip install -q --no-build-isolation --no-deps --no-index \
    --target "$tmp/py" clients/python >"$tmp/pip" 2>&1 || { cat "$tmp/pip" >&2; bad "pip install clients/python failed"; }
[ -f "$tmp/py/sandq/__init__.py" ] || bad "pip installed no sandq package"
rm -rf clients/python/build clients/python/sandq.egg-info

make -s B="$tmp/build" DESTDIR="$dest" PREFIX=/usr uninstall >"$tmp/log" 2>&1 ||
	{ cat "$tmp/log" >&2; bad "make uninstall failed"; }
left=$(find "$dest" ! -type d; find "$dest" -type d -name '*sandq*')
[ -z "$left" ] || bad "uninstall left: $left"

[ $fail = 0 ] || exit 1
echo "install_test: installed and uninstalled under $dest"
