#!/bin/bash
# test/pgbuild.sh -- build a PostgreSQL server from Debian's source package,
# with assertions, into a cache outside the work tree.
#
#	test/pgbuild.sh [MAJOR]		(default 15)
#
# Prints the path of the build's pg_config on its last line.  The build is
# made once per machine and reused: a finished build leaves a "done" marker
# beside it.  The source comes from Debian's archive with "apt-get source",
# without Debian's patches (they move the server's directories to Debian's
# system paths, outside the cache);
# the deb-src list and apt's state for it live in the cache, so the
# machine's own apt configuration is not touched.  The cache directory is
# $DISTLOCK_PG_CACHE, or /var/cache/distlock-pg.
set -euo pipefail

major=${1:-15}
cache=${DISTLOCK_PG_CACHE:-/var/cache/distlock-pg}
prefix=$cache/pg$major-cassert
log=$cache/pg$major-build.log

if [ -f "$prefix/done" ]; then
	echo "$prefix/bin/pg_config"
	exit 0
fi

# Which Debian suite carries which major.
case $major in
	15) suite=bookworm ;;
	17) suite=trixie ;;
	*) suite=sid ;;
esac

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo mkdir -p "$cache"
$sudo chown "$(id -u):$(id -g)" "$cache"

# Build tools and the libraries of the configure options below.
pkgs=(dpkg-dev gcc make bison flex pkg-config zlib1g-dev libicu-dev
	libssl-dev liblz4-dev libzstd-dev libxml2-dev)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
		grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "installing: ${missing[*]}" >&2
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
		--no-install-recommends "${missing[@]}" >/dev/null
fi

# A private apt configuration that knows only the deb-src list, on the
# archive the machine's own sources name.
apt=$cache/apt
mkdir -p "$apt/sources" "$apt/lists/partial" "$apt/cache/archives/partial"
archive=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
	/etc/apt/sources.list.d/*.list 2>/dev/null |
	grep -E '^(URIs:|deb )' | grep -oE 'https?://[^ ]+/debian/?( |$)' |
	head -1 | tr -d ' ' || true)
archive=${archive:-http://deb.debian.org/debian}
cat >"$apt/sources/src.sources" <<EOF
Types: deb-src
URIs: ${archive%/}
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
aptopts=(-o Dir::Etc::sourcelist=/dev/null
	-o Dir::Etc::sourceparts="$apt/sources"
	-o Dir::State::Lists="$apt/lists"
	-o Dir::Cache="$apt/cache")

src=$cache/src$major
rm -rf "$src"
mkdir -p "$src"
echo "fetching the postgresql-$major source package ($suite)" >&2
apt-get "${aptopts[@]}" -qq update >&2
(cd "$src" && apt-get "${aptopts[@]}" -qq source --download-only \
	"postgresql-$major" >&2)
(cd "$src" && dpkg-source -x --no-check --skip-patches ./*.dsc tree >/dev/null)

# The options a packager uses that matter to distlock, plus assertions
# and debugging symbols.
echo "building PostgreSQL $major with assertions (log: $log)" >&2
start=$(date +%s)
(
	# Run from a make recipe (make test-assert), MAKELEVEL would say this
	# is not a top-level make, and PostgreSQL's makefiles build their
	# generated headers (utils/errcodes.h...) only in a top-level make.
	unset MAKELEVEL MAKEFLAGS MFLAGS
	# "set -e" does not apply in a subshell whose status "||" tests: each
	# step stops the build itself.
	cd "$src/tree" &&
	./configure --prefix="$prefix" --enable-cassert --enable-debug \
		--with-icu --with-openssl --with-lz4 --with-zstd --with-libxml \
		--without-readline CFLAGS="-O2 -g" &&
	make -j"$(nproc)" &&
	make install &&
	# What distlock's suites use: the regression and isolation drivers,
	# and the contrib modules its tests and benchmarks load.
	make -C src/test/regress install &&
	make -C src/test/isolation install || exit 1
	for m in amcheck pg_stat_statements pg_walinspect pgcrypto test_decoding; do
		make -C "contrib/$m" install || exit 1
	done
) >"$log" 2>&1 || {
	tail -40 "$log" >&2
	exit 1
}
chmod -R a+rX "$prefix"
touch "$prefix/done"
rm -rf "$src"
echo "built in $(($(date +%s) - start)) s" >&2
echo "$prefix/bin/pg_config"
