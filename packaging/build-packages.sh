#!/bin/sh
# Builds dist/pbx_VERSION_ARCH.deb and dist/pbx-VERSION-1.ARCH.rpm from nfpms.yaml.
#
# Usage: packaging/build-packages.sh        (what `make package` runs)
#
# Expects bin/pbx and bin/pbxctl from `make build`. Generates shell completions
# (`pbx[ctl] completion bash|zsh|fish`) and man pages (`pbx man DIR`, `pbxctl man
# DIR`, and the hand-written pbx(1)) into a staging directory, then runs nfpm from
# the Go module proxy.
#
# Environment:
#   PBX_VERSION  package version, used as given; default derived from VERSION
#   VERSION      `git describe --tags --always --dirty` output (the Makefile passes it);
#                default: run git describe here
#   PBX_CONFIG_DIR  where the default pbx.yaml comes from; default packaging/config
#   PBX_EXAMPLES_DIR  complete example configurations; default packaging/examples
#                (kept apart from PBX_CONFIG_DIR so that validating the default
#                configuration does not read the examples too)
#   PBX_ARCH     Go architecture of the binaries; default `go env GOARCH`
#   NFPM         nfpm command; default `go run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.44.2`
#   DIST         output directory; default dist
#   PBX_PACKAGERS  which packages to build; default "deb rpm"
set -eu

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

die() {
	echo "build-packages: $*" >&2
	exit 1
}

# version_from_git turns `git describe` into a version dpkg and rpm both order
# correctly: v1.2.3 -> 1.2.3, v1.2.3-rc1 -> 1.2.3~rc1 (before 1.2.3),
# v1.2.3-4-gabc1234 -> 1.2.3+git4.abc1234 (after 1.2.3, before 1.2.4), no tag ->
# 0.0.0~git<commits>.<sha> (before any release), and ".dirty" appended for
# uncommitted changes. rpm forbids "-" in a version.
version_from_git() {
	desc=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || true)}
	case "$desc" in
	"" | dev)
		echo 0.0.0~src
		return
		;;
	esac
	dirty=
	case "$desc" in
	*-dirty)
		dirty=.dirty
		desc=${desc%-dirty}
		;;
	esac
	case "$desc" in
	*-[0-9]*-g[0-9a-f]*)
		base=${desc%-*-g*}
		rest=${desc#"$base"-}
		v="$(release "$base")+git${rest%%-g*}.${rest#*-g}"
		;;
	*.*)
		v=$(release "$desc")
		;;
	*)
		v="0.0.0~git$(git rev-list --count HEAD 2>/dev/null || echo 0).$desc"
		;;
	esac
	echo "$v$dirty"
}

# release turns a tag into a version: no leading v, "-" (a pre-release) as "~".
release() {
	printf '%s' "${1#v}" | tr -- '-' '~'
}

PBX_VERSION=${PBX_VERSION:-$(version_from_git)}
case "$PBX_VERSION" in
[0-9]*) ;;
*) die "version '$PBX_VERSION' must start with a digit" ;;
esac
if printf '%s' "$PBX_VERSION" | grep -q '[^A-Za-z0-9.+~]'; then
	die "version '$PBX_VERSION' may contain only letters, digits and . + ~ (dpkg and rpm both accept those)"
fi
PBX_ARCH=${PBX_ARCH:-$(go env GOARCH)}
NFPM=${NFPM:-go run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.44.2}
DIST=${DIST:-dist}

for b in pbx pbxctl; do
	[ -x "bin/$b" ] || die "bin/$b is missing; run 'make build' first"
done
PBX_CONFIG_DIR=${PBX_CONFIG_DIR:-packaging/config}
PBX_EXAMPLES_DIR=${PBX_EXAMPLES_DIR:-packaging/examples}
[ -f "$PBX_CONFIG_DIR/pbx.yaml" ] || die "$PBX_CONFIG_DIR/pbx.yaml is missing"

PBX_STAGE=$(mktemp -d)
trap 'rm -rf "$PBX_STAGE"' EXIT INT TERM
mkdir -p "$PBX_STAGE/completions/bash" "$PBX_STAGE/completions/zsh" "$PBX_STAGE/completions/fish" \
	"$PBX_STAGE/man/man1" "$PBX_STAGE/gen" "$PBX_STAGE/examples"

# Example configurations.
if [ -d "$PBX_EXAMPLES_DIR" ]; then
	cp -R "$PBX_EXAMPLES_DIR/." "$PBX_STAGE/examples/"
else
	echo "build-packages: $PBX_EXAMPLES_DIR is missing" >&2
	exit 1
fi

# Completions and man pages come from the same command trees the admin runs, named
# as each shell looks them up.
for b in pbxctl pbx; do
	bin/$b completion bash >"$PBX_STAGE/completions/bash/$b" || die "bin/$b completion bash failed"
	bin/$b completion zsh >"$PBX_STAGE/completions/zsh/_$b" || die "bin/$b completion zsh failed"
	bin/$b completion fish >"$PBX_STAGE/completions/fish/$b.fish" || die "bin/$b completion fish failed"
	for f in "bash/$b" "zsh/_$b" "fish/$b.fish"; do
		[ -s "$PBX_STAGE/completions/$f" ] || die "bin/$b wrote an empty completion script $f"
	done
done
bin/pbx man "$PBX_STAGE/gen" >/dev/null || die "bin/pbx man DIR failed (the hidden man-page command)"
bin/pbxctl man "$PBX_STAGE/gen" >/dev/null || die "bin/pbxctl man DIR failed (the hidden man-page command)"
# The hand-written pbx(1) replaces the generated one: it adds the files, signals,
# environment and systemd commands an admin looks for.
cp packaging/man/pbx.1 "$PBX_STAGE/gen/pbx.1"
find "$PBX_STAGE/gen" -type f -name '*.1' -exec cp {} "$PBX_STAGE/man/man1/" \;
for page in pbx-run.1 pbxctl.1 pbxctl-validate.1; do
	[ -e "$PBX_STAGE/man/man1/$page" ] || die "no $page among the generated man pages"
done
# -n leaves the time stamp out, so the same pages give the same package.
gzip -9n "$PBX_STAGE"/man/man1/*.1

# The unit that goes into the package passes verify and the exposure threshold,
# and every man: page it names is among the pages just generated.
if command -v systemd-analyze >/dev/null 2>&1; then
	packaging/check-unit.sh bin "$PBX_STAGE/man" >"$PBX_STAGE/check-unit.log" 2>&1 || {
		cat "$PBX_STAGE/check-unit.log" >&2
		die "systemd/pbx.service fails packaging/check-unit.sh"
	}
else
	echo "build-packages: systemd-analyze is missing, unit not checked (apt-get install systemd)" >&2
fi

# Reproducible time stamps: the last commit's time, unless the caller set one.
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s)
fi
export PBX_VERSION PBX_ARCH PBX_STAGE PBX_CONFIG_DIR SOURCE_DATE_EPOCH

mkdir -p "$DIST"
echo "build-packages: pbx $PBX_VERSION ($PBX_ARCH)"
for packager in ${PBX_PACKAGERS:-deb rpm}; do
	# shellcheck disable=SC2086 # NFPM is a command line
	$NFPM package -f nfpms.yaml -p "$packager" -t "$DIST/" >"$PBX_STAGE/nfpm.log" 2>&1 || {
		cat "$PBX_STAGE/nfpm.log" >&2
		die "nfpm failed for $packager"
	}
	sed -n 's/.*created package: //p' "$PBX_STAGE/nfpm.log"
done
ls -l "$DIST"/pbx[_-]"$PBX_VERSION"[_-]*
