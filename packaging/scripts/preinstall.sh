#!/bin/sh
# pbx preinstall (deb preinst, rpm %pre): create the pbx system user and group before
# the files are unpacked, so every path owned by them gets the right owner.
#
# deb: preinst install|upgrade [OLD-VERSION]    rpm: %pre 1 (install) | 2 (upgrade)
set -eu

sysusers_line='u pbx - "pbx SIP PBX" /var/lib/pbx'

create_user() {
	if getent passwd pbx >/dev/null 2>&1; then
		return 0
	fi
	if command -v systemd-sysusers >/dev/null 2>&1; then
		# Reads the same line as /usr/lib/sysusers.d/pbx.conf, which is not unpacked yet.
		if printf '%s\n' "$sysusers_line" | systemd-sysusers - >/dev/null 2>&1; then
			return 0
		fi
	fi
	nologin=/usr/sbin/nologin
	[ -x "$nologin" ] || nologin=/sbin/nologin
	[ -x "$nologin" ] || nologin=/bin/false
	if command -v useradd >/dev/null 2>&1; then
		getent group pbx >/dev/null 2>&1 || groupadd --system pbx
		useradd --system --gid pbx --home-dir /var/lib/pbx --no-create-home \
			--shell "$nologin" --comment "pbx SIP PBX" pbx
	elif command -v adduser >/dev/null 2>&1; then
		adduser --system --group --home /var/lib/pbx --no-create-home \
			--shell "$nologin" --gecos "pbx SIP PBX" pbx
	else
		echo "pbx: cannot create the pbx user: none of systemd-sysusers, useradd or adduser is installed" >&2
		exit 1
	fi
}

case "${1:-}" in
install | upgrade | 1 | 2)
	create_user
	;;
esac
exit 0
