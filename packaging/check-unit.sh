#!/bin/sh
# Checks systemd/pbx.service: `systemd-analyze verify` must print nothing, and
# `systemd-analyze security` must rate the exposure 2.0 or lower.
#
# Usage: packaging/check-unit.sh [BINDIR] [MANDIR]
#
# verify insists that every Exec*= program exists, so it checks a copy of the unit
# whose /usr/bin/pbx and /usr/bin/pbxctl point at BINDIR (default: bin/ of the
# repository, as `make build` leaves it). Without built binaries, executable
# stand-ins are used and a notice says so. When MANDIR (a directory with man1/) is
# given, every man: page in Documentation= must exist there.
set -eu

repo=$(cd "$(dirname "$0")/.." && pwd)
unit=$repo/systemd/pbx.service
bindir=${1:-$repo/bin}
mandir=${2:-}
threshold=20 # systemd-analyze's scale: 20 is an exposure of 2.0

command -v systemd-analyze >/dev/null 2>&1 || {
	echo "check-unit: systemd-analyze is missing; install it: apt-get install systemd" >&2
	exit 1
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM

for b in pbx pbxctl; do
	if [ -x "$bindir/$b" ]; then
		ln -s "$(cd "$bindir" && pwd)/$b" "$work/$b"
	else
		echo "check-unit: $bindir/$b is not built; verifying against a stand-in"
		printf '#!/bin/sh\nexit 0\n' >"$work/$b"
		chmod +x "$work/$b"
	fi
done
sed -e "s#/usr/bin/pbxctl #$work/pbxctl #g" -e "s#/usr/bin/pbx #$work/pbx #g" \
	"$unit" >"$work/pbx.service"
if grep -q '/usr/bin/pbx' "$work/pbx.service"; then
	echo "check-unit: an Exec line names /usr/bin/pbx in a form this script does not rewrite" >&2
	exit 1
fi

status=0

# verify returns 0 even for unknown keys (it only warns), so any output fails.
# Man pages are checked below against the package's own, not the host's.
out=$(cd "$work" && systemd-analyze verify --man=no --recursive-errors=no pbx.service 2>&1) || status=1
if [ -n "$out" ] || [ "$status" -ne 0 ]; then
	printf '%s\n' "$out" >&2
	echo "check-unit: systemd-analyze verify: FAILED" >&2
	status=1
else
	echo "check-unit: systemd-analyze verify: ok"
fi

if [ -n "$mandir" ]; then
	for page in $(sed -n 's/^Documentation=//p' "$unit" | tr ' ' '\n' | sed -n 's/^man://p'); do
		name=${page%%(*}
		section=${page#*(}
		section=${section%)}
		if [ -e "$mandir/man$section/$name.$section" ] || [ -e "$mandir/man$section/$name.$section.gz" ]; then
			echo "check-unit: Documentation $page: ok"
		else
			echo "check-unit: Documentation names $page, but $mandir/man$section/$name.$section is missing" >&2
			status=1
		fi
	done
fi

if out=$(systemd-analyze security --offline=yes --threshold=$threshold "$unit" 2>&1); then
	printf '%s\n' "$out" | grep -F 'Overall exposure level'
	echo "check-unit: systemd-analyze security (threshold $threshold): ok"
else
	printf '%s\n' "$out" | grep -vF '✓' >&2
	echo "check-unit: systemd-analyze security: exposure above $threshold/100" >&2
	status=1
fi
exit $status
