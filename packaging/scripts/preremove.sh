#!/bin/sh
# pbx preremove (deb prerm, rpm %preun).
#
# deb: prerm remove | upgrade NEW-VERSION | deconfigure | failed-upgrade
# rpm: %preun 0 (erase) | 1 (upgrade)
#
# Only a real removal stops and disables the service: an upgrade leaves a running
# pbx alone so calls in progress continue (postinstall tells the admin to restart).
set -eu

case "${1:-}" in
remove | 0) ;;
*) exit 0 ;;
esac

say() { printf 'pbx: %s\n' "$*"; }

if ! command -v systemctl >/dev/null 2>&1; then
	exit 0
fi

if [ -d /run/systemd/system ]; then
	# Stopping drains: new calls are refused and calls in progress get up to
	# TimeoutStopSec to finish.
	if systemctl is-active --quiet pbx.service; then
		say "stopping pbx (calls in progress are given time to finish)"
	fi
	systemctl --no-reload disable --now pbx.service >/dev/null 2>&1 ||
		say "could not stop or disable pbx.service; check: systemctl status pbx"
else
	systemctl --no-reload disable pbx.service >/dev/null 2>&1 || true
fi
exit 0
