#!/bin/bash
# bench/graphile/install.sh -- install graphile-worker, the LISTEN/NOTIFY
# peer of the waiting calls' benchmark (bench/wake.py), and a Node it runs on.
#
# graphile-worker 0.18 wants Node 22.18 or later; Debian 12 ships 18 (and
# this machine may have 20).  The npm registry's node-linux-<arch> packages
# ship Node's own binary, so package.json lists the two of them as optional
# dependencies pinned to one version, and npm installs the one whose "cpu"
# matches.  Everything goes into a cache directory outside the work tree
# ($DISTLOCK_BENCH_CACHE, default /var/cache/distlock-bench), with
# "npm ci" against the committed lockfile, and only when the lockfile has
# changed since the last install.  Needs npm (any Node that runs npm).
#
# Prints the install directory (holding node_modules/) on success; exits
# non-zero, with the reason on stderr, when it cannot install.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${DISTLOCK_BENCH_CACHE:-/var/cache/distlock-bench}/graphile

command -v npm >/dev/null || {
	echo "npm is not installed" >&2
	exit 1
}
mkdir -p "$cache"
stamp=$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -c1-16)
if [ "$(cat "$cache/.stamp" 2>/dev/null)" != "$stamp" ] ||
	! "$cache/node_modules/.bin/node" --version >/dev/null 2>&1; then
	cp "$here/package.json" "$here/package-lock.json" "$cache/"
	rm -f "$cache/.stamp"
	# engine warnings are about the npm's own Node, not the one installed
	(cd "$cache" && npm ci --no-audit --no-fund --loglevel=error \
		--engine-strict=false >"$cache/npm.log" 2>&1) || {
		tail -5 "$cache/npm.log" >&2
		exit 1
	}
	echo "$stamp" >"$cache/.stamp"
fi
"$cache/node_modules/.bin/node" -e '
	const [major, minor] = process.versions.node.split(".").map(Number);
	process.exit(major > 22 || (major === 22 && minor >= 18) ? 0 : 1)' || {
	echo "the Node in $cache is older than graphile-worker needs" >&2
	exit 1
}
echo "$cache"
