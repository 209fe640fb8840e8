#!/bin/bash
# test/deps.sh -- install what distlock's build, tests and demo need.
#
# Debian 12 packages only.  Runs "apt-get update" once, and only when
# something is missing, so a machine that has everything is not touched.
# libkrb5-dev: Debian's server headers include gssapi.h from libpq-be.h,
# which src/wake.c needs for the client's socket.
# postgresql-15-auto-failover, pg-auto-failover-cli: the failover test on
# pg_auto_failover (test/failover).
set -euo pipefail

pkgs=(gcc make postgresql-15 postgresql-server-dev-15 libpq-dev
	libipc-run-perl python3 python3-psycopg pgbouncer libkrb5-dev
	postgresql-15-auto-failover pg-auto-failover-cli)

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
		grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing: ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
	--no-install-recommends "${missing[@]}" >/dev/null
