#!/bin/sh
# pbx postinstall (deb postinst, rpm %post).
#
# deb: postinst configure [LAST-CONFIGURED-VERSION] | abort-upgrade | abort-remove ...
# rpm: %post 1 (install) | 2 (upgrade)
#
# First install: create /etc/pbx/pbx.yaml from the packaged default, enable the
# service, and start it only if `pbxctl validate /etc/pbx` is clean.
# Upgrade: never restart. A running pbx may have calls in progress; the admin
# chooses the moment with `systemctl restart pbx`.
# Without a running systemd (chroot, container) nothing fails: the steps that need
# it are skipped with a message.
set -eu

default_config=/usr/share/pbx/pbx.yaml
sysusers_line='u pbx - "pbx SIP PBX" /var/lib/pbx'

say() { printf 'pbx: %s\n' "$*"; }

case "${1:-}" in
configure)
	if [ -z "${2:-}" ]; then action=install; else action=upgrade; fi
	;;
1) action=install ;;
[2-9] | [1-9][0-9]*) action=upgrade ;;
*) exit 0 ;; # abort-upgrade, abort-remove, abort-deconfigure: nothing was changed
esac

create_user() {
	if getent passwd pbx >/dev/null 2>&1; then
		return 0
	fi
	if command -v systemd-sysusers >/dev/null 2>&1 &&
		systemd-sysusers /usr/lib/sysusers.d/pbx.conf >/dev/null 2>&1 &&
		getent passwd pbx >/dev/null 2>&1; then
		return 0
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
		say "cannot create the pbx user (${sysusers_line}): install systemd, passwd or adduser" >&2
		exit 1
	fi
}

# Directories as /usr/lib/tmpfiles.d/pbx.conf declares them.
create_directories() {
	if command -v systemd-tmpfiles >/dev/null 2>&1 &&
		systemd-tmpfiles --create /usr/lib/tmpfiles.d/pbx.conf >/dev/null 2>&1; then
		return 0
	fi
	mkdir -p /etc/pbx /var/lib/pbx
	chown root:pbx /etc/pbx
	chmod 0750 /etc/pbx
	chown pbx:pbx /var/lib/pbx
	chmod 0750 /var/lib/pbx
}

# The UDP buffer maxima take effect at once where the kernel lets us (not in a
# container or chroot, where this quietly does nothing); they apply at boot anyway.
apply_sysctl() {
	if command -v sysctl >/dev/null 2>&1; then
		sysctl -q -p /usr/lib/sysctl.d/50-pbx.conf >/dev/null 2>&1 || true
	fi
}

# The default configuration is copied, not shipped as a package conffile: an upgrade
# then never overwrites the admin's edits and never stops at a dpkg conffile
# prompt. It is copied only on first install and only into an empty /etc/pbx, so an
# admin who split the configuration into other files does not get a second System
# document.
install_default_config() {
	for f in /etc/pbx/*.yaml /etc/pbx/*.yml; do
		if [ -e "$f" ]; then
			return 0
		fi
	done
	cp "$default_config" /etc/pbx/pbx.yaml
	chown root:pbx /etc/pbx/pbx.yaml
	chmod 0640 /etc/pbx/pbx.yaml
	say "installed the default configuration in /etc/pbx/pbx.yaml"
}

# Validates as the pbx user where possible, so an unreadable file is reported as
# the daemon would meet it.
validate() {
	if command -v runuser >/dev/null 2>&1; then
		runuser -u pbx -- /usr/bin/pbxctl validate /etc/pbx
	else
		/usr/bin/pbxctl validate /etc/pbx
	fi
}

systemd_running() { [ -d /run/systemd/system ]; }

create_user
create_directories
apply_sysctl
if [ "$action" = install ]; then
	install_default_config
fi

if ! command -v systemctl >/dev/null 2>&1; then
	say "systemd is not installed: start the daemon with 'pbx run --config /etc/pbx' under your service manager"
	exit 0
fi

if [ "$action" = install ]; then
	# Works offline too (chroot, image build): it only creates the symlinks.
	systemctl --no-reload enable pbx.service >/dev/null 2>&1 ||
		say "could not enable pbx.service; run: systemctl enable pbx"
fi

if ! systemd_running; then
	say "systemd is not running here (chroot or container): pbx was not started"
	exit 0
fi

systemctl daemon-reload || true

if [ "$action" = upgrade ]; then
	if systemctl is-active --quiet pbx.service; then
		say "pbx is still running the previous version; it was not restarted so calls in progress continue"
		if validate >/dev/null 2>&1; then
			say "when no calls are in progress, run: systemctl restart pbx"
		else
			say "the new version rejects the current configuration; fix what this shows before restarting:"
			validate || true
			say "then run: systemctl restart pbx"
		fi
	elif ! systemctl is-enabled --quiet pbx.service 2>/dev/null; then
		say "pbx.service is not enabled; to start it now and at boot, run: systemctl enable --now pbx"
	fi
	exit 0
fi

if validate; then
	if systemctl start pbx.service; then
		say "pbx is running; logs: journalctl -u pbx"
	else
		say "pbx did not start; see: journalctl -u pbx -n 50"
	fi
else
	say "pbx was enabled but not started: fix the configuration in /etc/pbx, check it with"
	say "'pbxctl validate /etc/pbx', then run: systemctl start pbx"
fi
exit 0
