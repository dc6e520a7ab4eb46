#!/bin/sh
# Install test for the pbx .deb: what an admin does on a machine nobody prepared.
#
# Usage: packaging/test-install.sh [PACKAGE.deb]     (what `make test-package` runs)
#
# Runs as root. In a fresh minimal Debian 12 (bookworm) root made by debootstrap, it
# installs the package with dpkg, checks the user, directories, owners and files,
# validates the shipped configuration, runs `pbx run --config /etc/pbx` and checks
# that it answers SIP OPTIONS on loopback, upgrades to a rebuilt package with a
# higher version and a changed default configuration and checks that the admin's
# edit of /etc/pbx/pbx.yaml is kept without any prompt, then removes (configuration
# and data kept) and purges (/etc/pbx gone, data kept).
#
# It does all of that in a chroot with systemd installed (sysusers, tmpfiles,
# `systemctl enable` offline) and in a bare minbase chroot (useradd, mkdir); systemd
# never runs in a chroot, so both take the "systemd is not running" path. Then it
# boots the systemd root with systemd-nspawn (private network) and does what the
# admin does on a real machine: the package starts pbx through the unit (Type=notify,
# User=pbx, every hardening line), `systemctl reload pbx` succeeds, and fails
# visibly on a configuration pbxctl rejects while the daemon keeps running, the
# journal stores each JSON line at its priority, the watchdog is fed, an upgrade
# leaves the running daemon alone, and a first install over a broken configuration
# enables pbx without starting it. Last, the .rpm of the same build goes through
# install, upgrade and erase in a bare root with rpm --root, so the scripts' rpm
# argument conventions (1 install, 2 upgrade, 0 erase) are exercised too.
#
# PACKAGE.deb defaults to the newest dist/pbx_*_ARCH.deb (from `make package`); when
# there is none, packaging/build-packages.sh builds it from bin/.
#
# Environment:
#   PBX_TEST_CACHE   where debootstrapped roots are cached as tarballs (/var/cache/pbx-test)
#   PBX_TEST_MIRROR  Debian mirror (http://deb.debian.org/debian)
#   PBX_TEST_ROOTS   which roots to test ("systemd plain booted rpm")
set -eu

started=$(date +%s)
repo=$(cd "$(dirname "$0")/.." && pwd)
suite=bookworm
mirror=${PBX_TEST_MIRROR:-http://deb.debian.org/debian}
cache=${PBX_TEST_CACHE:-/var/cache/pbx-test}
roots=${PBX_TEST_ROOTS:-systemd plain booted rpm}
path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

say() { printf 'test-install: %s\n' "$*"; }
die() {
	say "$*" >&2
	exit 1
}

passed=0
failed=0
# check DESCRIPTION COMMAND...: runs COMMAND and records the outcome.
check() {
	desc=$1
	shift
	if "$@"; then
		passed=$((passed + 1))
		printf 'ok      %s\n' "$desc"
	else
		failed=$((failed + 1))
		printf 'FAILED  %s\n' "$desc"
	fi
}

[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap, chroot and mount need it)"
for tool in dpkg dpkg-deb go timeout sha256sum; do
	command -v "$tool" >/dev/null 2>&1 || die "$tool is missing"
done
# need COMMAND PACKAGE: installs PACKAGE with apt-get when COMMAND is missing,
# refreshing the package lists once per run.
apt_updated=
need() {
	command -v "$1" >/dev/null 2>&1 && return 0
	say "installing $2"
	if [ -z "$apt_updated" ]; then
		apt-get update -qq >/dev/null 2>&1 || true
		apt_updated=yes
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >/dev/null ||
		die "cannot install $2; run: apt-get install $2"
}
need debootstrap debootstrap
arch=$(dpkg --print-architecture)

# ---------------------------------------------------------------- work area --

work=$(mktemp -d /var/tmp/pbx-test.XXXXXX)
daemon=
container=
init=
mounted=

cleanup() {
	status=$?
	if [ -n "$daemon" ]; then
		kill -KILL "$daemon" 2>/dev/null || true
	fi
	if [ -n "$container" ]; then
		kill_container
	fi
	for m in $mounted; do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
	done
	# Never delete while anything is still mounted below the work area: a bind
	# mount of /dev would take the host's device nodes with it.
	if grep -q " $work/" /proc/self/mounts; then
		say "mounts remain under $work; not deleting it" >&2
	else
		rm -rf "$work"
	fi
	exit $status
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --------------------------------------------------------------- packages --

old_deb=${1:-}
if [ -z "$old_deb" ]; then
	# shellcheck disable=SC2012 # names are ours: pbx_VERSION_ARCH.deb
	old_deb=$(ls -t "$repo"/dist/pbx_*_"$arch".deb 2>/dev/null | head -n 1 || true)
fi
if [ -z "$old_deb" ]; then
	say "no package in dist/; building one"
	PBX_PACKAGERS=deb "$repo/packaging/build-packages.sh" >/dev/null
	# shellcheck disable=SC2012
	old_deb=$(ls -t "$repo"/dist/pbx_*_"$arch".deb | head -n 1)
fi
[ -f "$old_deb" ] || die "no such package: $old_deb"
old_version=$(dpkg-deb -f "$old_deb" Version)
old_upstream=${old_version%-*}
say "package $old_deb ($old_version)"

# The upgrade: the same binaries, a higher version, and a changed default
# configuration, which is what makes dpkg prompt about a conffile.
new_upstream=$old_upstream.1
mkdir "$work/config-up" "$work/dist-up"
cp -R "$repo/packaging/config/." "$work/config-up/"
printf '# Default changed by a later version of the package.\n' >>"$work/config-up/pbx.yaml"
packagers=deb
case " $roots " in *" rpm "*) packagers="deb rpm" ;; esac
PBX_VERSION=$new_upstream PBX_CONFIG_DIR=$work/config-up DIST=$work/dist-up PBX_PACKAGERS=$packagers \
	"$repo/packaging/build-packages.sh" >"$work/build-up.log" 2>&1 || {
	cat "$work/build-up.log" >&2
	die "could not build the upgrade package"
}
new_deb=$(ls "$work"/dist-up/pbx_*.deb)
new_version=$(dpkg-deb -f "$new_deb" Version)
dpkg --compare-versions "$new_version" gt "$old_version" ||
	die "upgrade version $new_version does not sort after $old_version"

(cd "$repo" && go build -o "$work/sipping" ./packaging/sipping) || die "cannot build packaging/sipping"

# ------------------------------------------------------------------ roots --

# make_root NAME FLAVOUR INCLUDE: a fresh root in $work/NAME, from the cache of
# FLAVOUR when possible.
make_root() {
	name=$1
	include=$3
	root=$work/$name
	tarball=$cache/$suite-minbase-$arch-$2.tar.gz
	mkdir -p "$root"
	if [ -f "$tarball" ] && tar -C "$root" --numeric-owner -xzpf "$tarball"; then
		say "root $name from $tarball"
		return 0
	fi
	rm -rf "$root" && mkdir -p "$root" "$cache"
	say "debootstrap $suite (minbase${include:+ + $include}) from $mirror"
	if ! debootstrap --variant=minbase ${include:+--include="$include"} \
		"$suite" "$root" "$mirror" >"$work/debootstrap-$name.log" 2>&1; then
		tail -n 20 "$work/debootstrap-$name.log" >&2
		die "debootstrap failed"
	fi
	tar -C "$root" --numeric-owner -czf "$tarball.tmp.$$" . && mv "$tarball.tmp.$$" "$tarball"
	say "cached the root as $tarball"
}

mount_root() {
	mount -t proc proc "$1/proc"
	mounted="$1/proc $mounted"
	mount --bind /dev "$1/dev"
	mounted="$1/dev $mounted"
}

umount_root() {
	umount "$1/dev" && umount "$1/proc"
	# shellcheck disable=SC2086 # one word per mount point
	mounted=$(printf '%s\n' $mounted | grep -v "^$1/" | tr '\n' ' ')
}

# in_root COMMAND...: runs COMMAND in the root with a clean environment and no input.
in_root() {
	chroot "$root" /usr/bin/env -i PATH="$path" LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive \
		"$@" </dev/null
}

# --------------------------------------------------------------- helpers --

# owner_mode PATH: "user:group mode" as seen inside the root.
owner_mode() {
	in_root stat -c '%U:%G %a' "$1" 2>/dev/null
}

quiet() { "$@" >/dev/null 2>&1; }
differ() { [ "$1" != "$2" ]; }
lacks() { ! grep -Eqi "$1" "$2"; }
system_uid() { [ -n "$1" ] && [ "$1" -lt 1000 ]; }
closed_shell() { case "$1" in */nologin | */false) return 0 ;; esac; return 1; }
has_yaml() { [ -n "$(find "$1" -type f -name '*.yaml' | head -n 1)" ]; }
not_installed() { ! in_root dpkg-query -W pbx >/dev/null 2>&1; }
# dpkg_field FIELD: a field of the installed pbx package.
dpkg_field() { in_root dpkg-query -W -f="\${$1}" pbx; }

is() { [ "$1" = "$2" ] || {
	printf '        got "%s", want "%s"\n' "$1" "$2"
	return 1
}; }

# free_port: a port no UDP or TCP socket on the host uses.
free_port() {
	i=0
	while [ $i -lt 50 ]; do
		port=$((20000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 10000))
		hex=$(printf '%04X' "$port")
		if ! cat /proc/net/udp /proc/net/udp6 /proc/net/tcp /proc/net/tcp6 2>/dev/null |
			grep -q ":$hex "; then
			echo "$port"
			return 0
		fi
		i=$((i + 1))
	done
	return 1
}

# set_sip_port FILE PORT: what an admin does to move SIP off 5060. Sets
# spec.sip.bindPort, adding it (or the whole sip block under spec) when absent, and
# rewrites the file in place so it keeps its owner and mode.
set_sip_port() {
	if grep -Eq '^ *sip: *(#.*)?$' "$1"; then
		awk -v port="$2" '
			function spaces(n,  s) { s = ""; while (n-- > 0) s = s " "; return s }
			function indent(s) { match(s, /^ */); return RLENGTH }
			insip && /^ *[^ #]/ && indent($0) <= sipind {
				print spaces(sipind + 2) "bindPort: " port; insip = 0; done = 1
			}
			insip && indent($0) == sipind + 2 && /^ *bindPort:/ {
				sub(/bindPort:.*/, "bindPort: " port); insip = 0; done = 1
			}
			{ print }
			!done && !insip && /^ *sip: *(#.*)?$/ { insip = 1; sipind = indent($0) }
			END {
				if (insip) { print spaces(sipind + 2) "bindPort: " port; done = 1 }
				if (!done) exit 3
			}
		' "$1" >"$work/edit.yaml" || return 1
	else
		awk -v port="$2" '
			{ print }
			!done && /^spec: *(#.*)?$/ { print "  sip:"; print "    bindPort: " port; done = 1 }
			END { if (!done) exit 3 }
		' "$1" >"$work/edit.yaml" || return 1
	fi
	cat "$work/edit.yaml" >"$1"
}

# ------------------------------------------------------------------- test --

test_root() {
	name=$1
	say "--- root: $name"
	mount_root "$root"
	cp "$old_deb" "$root/tmp/pbx-old.deb"
	cp "$new_deb" "$root/tmp/pbx-new.deb"

	# Install.
	if in_root timeout 300 dpkg -i /tmp/pbx-old.deb >"$work/install.log" 2>&1; then
		check "dpkg -i $old_version" true
	else
		check "dpkg -i $old_version" false
		sed 's/^/        /' "$work/install.log"
		umount_root "$root"
		return 0
	fi
	sed -n 's/^/        /; /pbx: /p' "$work/install.log"

	pw=$(in_root getent passwd pbx || true)
	check "user pbx exists" [ -n "$pw" ]
	uid=$(printf '%s' "$pw" | cut -d: -f3)
	check "pbx is a system user (uid $uid)" system_uid "$uid"
	check "pbx's home is /var/lib/pbx" is "$(printf '%s' "$pw" | cut -d: -f6)" /var/lib/pbx
	check "pbx cannot log in" closed_shell "$(printf '%s' "$pw" | cut -d: -f7)"
	check "group pbx exists" quiet in_root getent group pbx
	check "/etc/pbx is root:pbx 0750" is "$(owner_mode /etc/pbx)" "root:pbx 750"
	check "/etc/pbx/pbx.yaml is root:pbx 0640" is "$(owner_mode /etc/pbx/pbx.yaml)" "root:pbx 640"
	check "/var/lib/pbx is pbx:pbx 0750" is "$(owner_mode /var/lib/pbx)" "pbx:pbx 750"
	check "/etc/pbx/pbx.yaml is the shipped default" cmp -s "$root/etc/pbx/pbx.yaml" "$root/usr/share/pbx/pbx.yaml"
	for f in /usr/bin/pbx /usr/bin/pbxctl; do
		check "$f is root:root 0755" is "$(owner_mode $f)" "root:root 755"
	done
	for f in /usr/lib/systemd/system/pbx.service /usr/lib/sysusers.d/pbx.conf \
		/usr/lib/tmpfiles.d/pbx.conf /usr/share/man/man1/pbx.1.gz /usr/share/man/man1/pbxctl.1.gz \
		/usr/share/bash-completion/completions/pbxctl /usr/share/zsh/vendor-completions/_pbxctl \
		/usr/share/fish/vendor_completions.d/pbxctl.fish /usr/share/bash-completion/completions/pbx \
		/usr/share/doc/pbx/copyright; do
		check "$f installed" [ -s "$root$f" ]
	done
	# shellcheck disable=SC2016 # expanded by bash in the root
	check "bash completion for pbxctl loads" quiet in_root bash -c \
		'. /usr/share/bash-completion/completions/pbxctl && complete -p pbxctl' 
	check "examples under /usr/share/doc/pbx/examples" has_yaml "$root/usr/share/doc/pbx/examples"
	check "no dpkg conffiles (upgrades never prompt)" is "$(dpkg_field Conffiles)" ""
	if [ -x "$root/usr/bin/systemctl" ]; then
		check "pbx.service enabled offline" \
			[ -L "$root/etc/systemd/system/multi-user.target.wants/pbx.service" ]
	fi
	check "postinst says systemd is not running" grep -q "systemd is not" "$work/install.log"

	# The shipped configuration validates, as the daemon's user reads it.
	in_root runuser -u pbx -- pbxctl validate /etc/pbx >"$work/validate.log" 2>&1 && rc=0 || rc=$?
	check "pbxctl validate /etc/pbx: clean (exit $rc)" [ "$rc" -eq 0 ]
	check "pbxctl validate /etc/pbx: no warning lines" lacks "^warning" "$work/validate.log"
	[ "$rc" -eq 0 ] || sed 's/^/        /' "$work/validate.log"

	# The admin's edit: SIP on a free port (5060 may be taken by another test),
	# plus a marker line that must survive the upgrade.
	port=$(free_port) || die "no free port"
	check "edit sip.bindPort to $port" set_sip_port "$root/etc/pbx/pbx.yaml" "$port"
	printf '# Edited by the admin on %s.\n' "$(date -u +%FT%TZ)" >>"$root/etc/pbx/pbx.yaml"
	edited=$(sha256sum <"$root/etc/pbx/pbx.yaml")
	check "edited configuration validates" quiet in_root runuser -u pbx -- pbxctl validate /etc/pbx
	check "edit kept owner and mode" is "$(owner_mode /etc/pbx/pbx.yaml)" "root:pbx 640"

	# Run the daemon as the unit does, and ask it for OPTIONS from the host.
	chroot --userspec=pbx:pbx "$root" /usr/bin/env -i PATH="$path" HOME=/var/lib/pbx \
		/usr/bin/pbx run --config /etc/pbx </dev/null >"$work/run-$name.log" 2>&1 &
	daemon=$!
	"$work/sipping" -timeout 20s "127.0.0.1:$port" >"$work/sipping.log" 2>&1 && rc=0 || rc=$?
	if [ "$rc" -eq 0 ]; then
		check "pbx answers OPTIONS on 127.0.0.1:$port: $(cat "$work/sipping.log")" true
	else
		check "pbx answers OPTIONS on 127.0.0.1:$port (sipping exit $rc)" false
		sed 's/^/        /' "$work/sipping.log"
		tail -n 20 "$work/run-$name.log" | sed 's/^/        daemon: /'
	fi
	kill -TERM "$daemon" 2>/dev/null || true
	i=0
	while kill -0 "$daemon" 2>/dev/null && [ $i -lt 100 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	if kill -0 "$daemon" 2>/dev/null; then
		check "pbx stops within 10s of SIGTERM with no calls" false
		kill -KILL "$daemon" 2>/dev/null || true
		wait "$daemon" 2>/dev/null || true
	else
		wait "$daemon" && rc=0 || rc=$?
		check "pbx stops within 10s of SIGTERM with no calls, exit $rc" [ "$rc" -eq 0 ]
	fi
	daemon=
	check "everything in /var/lib/pbx belongs to pbx" \
		is "$(find "$root/var/lib/pbx" ! -uid "$uid" | head -n 3)" ""

	# Upgrade with no terminal and no input: a prompt would fail or hang (timeout).
	in_root timeout 120 dpkg -i /tmp/pbx-new.deb >"$work/upgrade.log" 2>&1 && rc=0 || rc=$?
	check "dpkg -i $new_version without a terminal (exit $rc)" [ "$rc" -eq 0 ]
	[ "$rc" -eq 0 ] || sed 's/^/        /' "$work/upgrade.log"
	check "installed version is $new_version" is "$(dpkg_field Version)" "$new_version"
	check "admin's /etc/pbx/pbx.yaml kept byte for byte" is "$(sha256sum <"$root/etc/pbx/pbx.yaml")" "$edited"
	check "the new default is shipped beside it" grep -q "later version" "$root/usr/share/pbx/pbx.yaml"
	check "no .dpkg-new/.dpkg-dist/.dpkg-old files" is "$(find "$root/etc/pbx" -name '*.dpkg-*')" ""
	check "dpkg asked nothing" lacks "configuration file|would you like" "$work/upgrade.log"

	# Remove: programs gone, configuration and data kept.
	in_root dpkg -r pbx >"$work/remove.log" 2>&1 && rc=0 || rc=$?
	check "dpkg -r pbx (exit $rc)" [ "$rc" -eq 0 ]
	check "/usr/bin/pbx removed" [ ! -e "$root/usr/bin/pbx" ]
	check "/etc/pbx/pbx.yaml kept with the edit" is "$(sha256sum <"$root/etc/pbx/pbx.yaml")" "$edited"
	check "/var/lib/pbx kept" [ -d "$root/var/lib/pbx" ]
	check "user pbx kept" quiet in_root getent passwd pbx
	check "dpkg -r printed no warnings" lacks warning "$work/remove.log"
	if [ -x "$root/usr/bin/systemctl" ]; then
		check "pbx.service no longer enabled" \
			[ ! -e "$root/etc/systemd/system/multi-user.target.wants/pbx.service" ]
	fi

	# Purge: configuration gone, data kept.
	in_root dpkg -P pbx >"$work/purge.log" 2>&1 && rc=0 || rc=$?
	check "dpkg -P pbx (exit $rc)" [ "$rc" -eq 0 ]
	check "/etc/pbx deleted" [ ! -e "$root/etc/pbx" ]
	check "/var/lib/pbx kept" [ -d "$root/var/lib/pbx" ]
	check "pbx no longer known to dpkg" not_installed

	umount_root "$root"
}

# ---------------------------------------------------------- booted root --

# in_booted COMMAND...: runs COMMAND inside the booted container.
in_booted() {
	nsenter -t "$init" -m -u -i -n -p -C -r -w \
		/usr/bin/env -i PATH="$path" LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@" </dev/null
}
# in_netns COMMAND...: runs a host COMMAND in the container's network namespace.
in_netns() { nsenter -t "$init" -n "$@" </dev/null; }
prop() { in_booted systemctl show -P "$1" pbx.service; }
# wait_for SECONDS COMMAND...: polls COMMAND every 0.2s until it succeeds.
wait_for() {
	n=$(($1 * 5))
	shift
	while [ "$n" -gt 0 ]; do
		if "$@" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.2
		n=$((n - 1))
	done
	return 1
}
booted_up() {
	state=$(in_booted systemctl is-system-running 2>/dev/null || true)
	[ "$state" = running ] || [ "$state" = degraded ]
}
# sip_ok PORT: the daemon in the container answers OPTIONS.
sip_ok() { in_netns "$work/sipping" -timeout 10s "127.0.0.1:$1" >"$work/sipping.log" 2>&1; }
# low_port_dropin: the drop-in the unit's header documents for ports below 1024.
low_port_dropin() {
	sed -n '/^#   \[Service\]/,/^#   PrivateUsers=no/s/^#   //p' "$root/usr/lib/systemd/system/pbx.service"
}

# child_of PID: a child process of PID (read from /proc: procps may be missing).
child_of() {
	for stat in /proc/[0-9]*/stat; do
		# The fourth field, after the parenthesised command name, is the parent.
		ppid=$(sed 's/.*) [A-Za-z] \([0-9]*\) .*/\1/' "$stat" 2>/dev/null) || continue
		if [ "$ppid" = "$1" ]; then
			pid=${stat#/proc/}
			echo "${pid%/stat}"
			return 0
		fi
	done
}

boot_container() {
	need systemd-nspawn systemd-container
	# Without systemd on the host there is no manager to create a scope for it.
	keep=
	[ -d /run/systemd/system ] || keep=--keep-unit
	systemd-nspawn --quiet --directory="$root" --boot --private-network --register=no \
		--console=passive $keep >"$work/nspawn.log" 2>&1 &
	container=$!
	init=
	n=0
	while [ -z "$init" ] && [ $n -lt 100 ]; do
		sleep 0.1
		init=$(child_of "$container")
		n=$((n + 1))
	done
	if [ -z "$init" ] || ! wait_for 60 booted_up; then
		tail -n 20 "$work/nspawn.log" >&2
		die "the booted root did not come up (systemd-nspawn); PBX_TEST_ROOTS=\"systemd plain\" skips this part"
	fi
}

# kill_container: ends the container at once. Killing its init ends every process
# in its PID namespace; killing only systemd-nspawn would leave them running. While
# systemd-nspawn lives, its child's pid cannot belong to anyone else.
kill_container() {
	if [ -n "$init" ] && kill -0 "$container" 2>/dev/null; then
		kill -KILL "$init" 2>/dev/null || true
	fi
	n=0
	while kill -0 "$container" 2>/dev/null && [ $n -lt 50 ]; do
		sleep 0.2
		n=$((n + 1))
	done
	kill -KILL "$container" 2>/dev/null || true
	wait "$container" 2>/dev/null || true
	container=
	init=
}

stop_container() {
	in_booted systemctl poweroff >/dev/null 2>&1 || true
	n=0
	while kill -0 "$container" 2>/dev/null && [ $n -lt 150 ]; do
		sleep 0.2
		n=$((n + 1))
	done
	kill_container
}

test_booted() {
	say "--- root: booted (systemd-nspawn, private network)"
	boot_container
	# /tmp in the container is its own tmpfs.
	cp "$old_deb" "$root/var/cache/pbx-old.deb"
	cp "$new_deb" "$root/var/cache/pbx-new.deb"

	# First install on a running systemd: enabled, validated, started.
	in_booted timeout 300 dpkg -i /var/cache/pbx-old.deb >"$work/install.log" 2>&1 && rc=0 || rc=$?
	check "dpkg -i $old_version (exit $rc)" [ "$rc" -eq 0 ]
	sed -n 's/^/        /; /pbx: /p' "$work/install.log"
	check "pbx.service enabled" is "$(in_booted systemctl is-enabled pbx.service)" enabled
	check "pbx.service active after install (Type=notify: READY=1 arrived)" \
		is "$(in_booted systemctl is-active pbx.service)" active
	# /proc/PID belongs to the process's user.
	check "runs as pbx" is "$(in_booted stat -c %U "/proc/$(prop MainPID)")" pbx
	if sip_ok 5060; then
		check "pbx answers OPTIONS on 127.0.0.1:5060: $(cat "$work/sipping.log")" true
	else
		check "pbx answers OPTIONS on 127.0.0.1:5060" false
		sed 's/^/        /' "$work/sipping.log"
		in_booted journalctl -u pbx --no-pager -n 20 -o cat | sed 's/^/        journal: /'
	fi

	# The journal stores each line at its priority, without the <N> prefix.
	in_booted journalctl -u pbx --no-pager -o cat _PID="$(prop MainPID)" >"$work/journal.log" 2>&1 || true
	check "journal has the daemon's JSON lines" grep -q '^{' "$work/journal.log"
	check "no <N> prefix left in the journal" lacks '^<[0-7]>' "$work/journal.log"
	in_booted journalctl -u pbx --no-pager -o cat -p info..info _PID="$(prop MainPID)" >"$work/journal-info.log" 2>&1 || true
	check "INFO lines stored at priority 6 (info)" grep -q '"level":"INFO"' "$work/journal-info.log"
	in_booted journalctl -u pbx --no-pager -o cat -p err >"$work/journal-err.log" 2>&1 || true
	check "no INFO line stored as an error" lacks '"level":"INFO"' "$work/journal-err.log"

	# Reload: validated first, then SIGHUP; a rejected configuration fails visibly
	# and leaves the daemon running.
	pid=$(prop MainPID)
	in_booted systemctl reload pbx.service >"$work/reload.log" 2>&1 && rc=0 || rc=$?
	check "systemctl reload pbx (exit $rc)" [ "$rc" -eq 0 ]
	check "reload kept the same process" is "$(prop MainPID)" "$pid"
	printf 'configVersion: pbx/v1\nkind: System\nspec: {sip: {bogusKey: 1}}\n' >"$root/etc/pbx/zz-broken.yaml"
	in_booted systemctl reload pbx.service >"$work/reload.log" 2>&1 && rc=0 || rc=$?
	check "systemctl reload pbx fails on a rejected configuration (exit $rc)" [ "$rc" -ne 0 ]
	check "pbx still active after the failed reload" is "$(in_booted systemctl is-active pbx.service)" active
	check "same process after the failed reload" is "$(prop MainPID)" "$pid"
	rm -f "$root/etc/pbx/zz-broken.yaml"

	# Watchdog: with a short WatchdogSec the daemon must keep feeding it.
	# (/run in the container is its own tmpfs: the drop-in goes to /etc.)
	mkdir -p "$root/etc/systemd/system/pbx.service.d"
	printf '[Service]\nWatchdogSec=2s\n' >"$root/etc/systemd/system/pbx.service.d/watchdog.conf"
	in_booted systemctl daemon-reload
	in_booted systemctl restart pbx.service || true
	pid=$(prop MainPID)
	sleep 5
	check "watchdog fed: same process 5s into WatchdogSec=2s" is "$(prop MainPID)" "$pid"
	check "watchdog fed: no restart" is "$(prop NRestarts)" 0
	check "the short WatchdogSec was in effect" is "$(prop WatchdogUSec)" 2s
	rm -rf "$root/etc/systemd/system/pbx.service.d"
	in_booted systemctl daemon-reload
	in_booted systemctl restart pbx.service || true
	wait_for 10 sip_ok 5060 || true

	# Upgrade while running: never restarted, the admin is told how.
	printf '# Edited by the admin on %s.\n' "$(date -u +%FT%TZ)" >>"$root/etc/pbx/pbx.yaml"
	edited=$(sha256sum <"$root/etc/pbx/pbx.yaml")
	pid=$(prop MainPID)
	in_booted timeout 120 dpkg -i /var/cache/pbx-new.deb >"$work/upgrade.log" 2>&1 && rc=0 || rc=$?
	check "dpkg -i $new_version while pbx runs (exit $rc)" [ "$rc" -eq 0 ]
	sed -n 's/^/        /; /pbx: /p' "$work/upgrade.log"
	check "upgrade did not restart pbx" is "$(prop MainPID)" "$pid"
	check "upgrade tells the admin to run systemctl restart pbx" grep -q "systemctl restart pbx" "$work/upgrade.log"
	check "admin's /etc/pbx/pbx.yaml kept byte for byte" is "$(sha256sum <"$root/etc/pbx/pbx.yaml")" "$edited"
	in_booted systemctl restart pbx.service && rc=0 || rc=$?
	check "systemctl restart pbx (exit $rc)" [ "$rc" -eq 0 ]
	check "restart started a new process" differ "$(prop MainPID)" "$pid"
	check "the new version answers OPTIONS" sip_ok 5060

	# A port below 1024: refused by the hardened unit, served with the drop-in its
	# header documents.
	cp "$root/etc/pbx/pbx.yaml" "$work/pbx.yaml.saved"
	set_sip_port "$root/etc/pbx/pbx.yaml" 506
	in_booted systemctl restart pbx.service >/dev/null 2>&1 && rc=0 || rc=$?
	check "port 506 without the drop-in: start refused (exit $rc)" [ "$rc" -ne 0 ]
	mkdir -p "$root/etc/systemd/system/pbx.service.d"
	low_port_dropin >"$root/etc/systemd/system/pbx.service.d/low-port.conf"
	check "the unit documents the low-port drop-in" grep -q '^AmbientCapabilities=CAP_NET_BIND_SERVICE$' \
		"$root/etc/systemd/system/pbx.service.d/low-port.conf"
	in_booted systemctl daemon-reload
	in_booted systemctl restart pbx.service && rc=0 || rc=$?
	check "port 506 with the documented drop-in: started (exit $rc)" [ "$rc" -eq 0 ]
	check "port 506 with the documented drop-in: answers OPTIONS" sip_ok 506
	rm -rf "$root/etc/systemd/system/pbx.service.d"
	cat "$work/pbx.yaml.saved" >"$root/etc/pbx/pbx.yaml"
	in_booted systemctl daemon-reload
	in_booted systemctl restart pbx.service || true

	# Stop drains at once with no calls in progress, and exits cleanly.
	start=$(date +%s)
	in_booted systemctl stop pbx.service || true
	check "systemctl stop pbx within 10s" [ $(($(date +%s) - start)) -le 10 ]
	check "clean exit on SIGTERM (Result=success)" is "$(prop Result)" success

	# Remove and purge.
	in_booted systemctl start pbx.service || true
	in_booted dpkg -r pbx >"$work/remove.log" 2>&1 && rc=0 || rc=$?
	check "dpkg -r pbx (exit $rc)" [ "$rc" -eq 0 ]
	check "pbx stopped by removal" is "$(in_booted systemctl is-active pbx.service || true)" inactive
	check "/etc/pbx/pbx.yaml kept" [ -f "$root/etc/pbx/pbx.yaml" ]
	in_booted dpkg -P pbx >"$work/purge.log" 2>&1 && rc=0 || rc=$?
	check "dpkg -P pbx (exit $rc)" [ "$rc" -eq 0 ]
	check "/etc/pbx deleted" [ ! -e "$root/etc/pbx" ]

	# First install over a configuration pbxctl rejects: enabled, not started,
	# and the install itself succeeds.
	mkdir -p "$root/etc/pbx"
	printf 'configVersion: pbx/v1\nkind: System\nspec: {sip: {bogusKey: 1}}\n' >"$root/etc/pbx/site.yaml"
	in_booted timeout 300 dpkg -i /var/cache/pbx-old.deb >"$work/install-bad.log" 2>&1 && rc=0 || rc=$?
	check "dpkg -i over a broken configuration succeeds (exit $rc)" [ "$rc" -eq 0 ]
	sed -n 's/^/        /; /pbx: /p' "$work/install-bad.log"
	check "the broken configuration is reported" grep -q "bogusKey" "$work/install-bad.log"
	check "pbx enabled but not started" is "$(in_booted systemctl is-enabled pbx.service) $(in_booted systemctl is-active pbx.service || true)" "enabled inactive"
	check "no pbx.yaml added beside the admin's documents" [ ! -e "$root/etc/pbx/pbx.yaml" ]
	in_booted dpkg -P pbx >/dev/null 2>&1 || true

	stop_container
}

# ------------------------------------------------------------- rpm root --

test_rpm() {
	say "--- root: rpm (rpm --root in a bare root)"
	need rpm rpm
	# shellcheck disable=SC2012 # names are ours: pbx-VERSION-1.ARCH.rpm
	old_rpm=$(ls "$(dirname "$old_deb")"/pbx-"$old_upstream"-1.*.rpm 2>/dev/null | head -n 1 || true)
	# shellcheck disable=SC2012
	new_rpm=$(ls "$work"/dist-up/pbx-*.rpm 2>/dev/null | head -n 1 || true)
	check "rpm of the same build beside the .deb" [ -n "$old_rpm" ]
	[ -n "$old_rpm" ] && [ -n "$new_rpm" ] || return 0
	mount_root "$root"
	# Debian's rpm asks for --force-debian on a Debian host; elsewhere it is unknown.
	force=
	rpm --help 2>/dev/null | grep -q -- --force-debian && force=--force-debian
	rpm --root="$root" --initdb
	rpmq() { rpm --root="$root" -q --qf "$1" pbx; }

	rpm --root="$root" -i $force "$old_rpm" >"$work/rpm-install.log" 2>&1 && rc=0 || rc=$?
	check "rpm -i $(basename "$old_rpm") (exit $rc)" [ "$rc" -eq 0 ]
	sed -n 's/^/        /; /pbx: /p' "$work/rpm-install.log"
	check "user pbx exists" quiet in_root getent passwd pbx
	check "/etc/pbx is root:pbx 0750" is "$(owner_mode /etc/pbx)" "root:pbx 750"
	check "/etc/pbx/pbx.yaml is root:pbx 0640" is "$(owner_mode /etc/pbx/pbx.yaml)" "root:pbx 640"
	check "/var/lib/pbx is pbx:pbx 0750" is "$(owner_mode /var/lib/pbx)" "pbx:pbx 750"
	check "/usr/bin/pbx is root:root 0755" is "$(owner_mode /usr/bin/pbx)" "root:root 755"
	check "zsh completion in site-functions" [ -s "$root/usr/share/zsh/site-functions/_pbxctl" ]
	check "pbxctl validate /etc/pbx: clean" quiet in_root runuser -u pbx -- pbxctl validate /etc/pbx

	printf '# Edited by the admin on %s.\n' "$(date -u +%FT%TZ)" >>"$root/etc/pbx/pbx.yaml"
	edited=$(sha256sum <"$root/etc/pbx/pbx.yaml")
	rpm --root="$root" -U $force "$new_rpm" >"$work/rpm-upgrade.log" 2>&1 && rc=0 || rc=$?
	check "rpm -U $(basename "$new_rpm") (exit $rc)" [ "$rc" -eq 0 ]
	check "installed version is $new_upstream" is "$(rpmq '%{VERSION}')" "$new_upstream"
	check "admin's /etc/pbx/pbx.yaml kept byte for byte" is "$(sha256sum <"$root/etc/pbx/pbx.yaml")" "$edited"
	check "no .rpmnew/.rpmsave files" is "$(find "$root/etc/pbx" -name '*.rpm*')" ""
	check "the new default is shipped beside it" grep -q "later version" "$root/usr/share/pbx/pbx.yaml"

	rpm --root="$root" -e pbx >"$work/rpm-erase.log" 2>&1 && rc=0 || rc=$?
	check "rpm -e pbx (exit $rc)" [ "$rc" -eq 0 ]
	check "/usr/bin/pbx removed" [ ! -e "$root/usr/bin/pbx" ]
	check "/usr/share/pbx removed with the package" [ ! -e "$root/usr/share/pbx" ]
	check "/etc/pbx/pbx.yaml kept with the edit" is "$(sha256sum <"$root/etc/pbx/pbx.yaml")" "$edited"
	check "/var/lib/pbx kept" [ -d "$root/var/lib/pbx" ]
	umount_root "$root"
}

say "packages ready in $(($(date +%s) - started))s"
for name in $roots; do
	phase=$(date +%s)
	case "$name" in
	systemd) make_root systemd systemd systemd && test_root systemd ;;
	plain) make_root plain plain "" && test_root plain ;;
	booted) make_root booted systemd systemd && test_booted ;;
	rpm) make_root rpm plain "" && test_rpm ;;
	*) die "unknown root '$name' in PBX_TEST_ROOTS (systemd, plain, booted, rpm)" ;;
	esac
	if grep -q " $work/$name/" /proc/self/mounts; then
		die "mounts remain under $work/$name"
	fi
	rm -rf "${work:?}/$name"
	say "root $name done in $(($(date +%s) - phase))s"
done

elapsed=$(($(date +%s) - started))
say "$passed passed, $failed failed in ${elapsed}s"
[ "$failed" -eq 0 ]
