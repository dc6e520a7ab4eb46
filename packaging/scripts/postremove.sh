#!/bin/sh
# pbx postremove (deb postrm, rpm %postun).
#
# deb: postrm remove | purge | upgrade NEW-VERSION | abort-install | abort-upgrade ...
# rpm: %postun 0 (erase) | 1 (upgrade)
#
# Remove keeps /etc/pbx (configuration) and /var/lib/pbx (call records, recordings,
# voicemail). Purge (deb only) deletes /etc/pbx and still keeps /var/lib/pbx, because
# recordings and call records are the business's data, not the package's. The pbx
# user stays, so files it owns never fall to a later user with the same id.
set -eu

say() { printf 'pbx: %s\n' "$*"; }

reload_systemd() {
	if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
		systemctl daemon-reload >/dev/null 2>&1 || true
	fi
}

case "${1:-}" in
remove)
	reload_systemd
	say "kept /etc/pbx (configuration) and /var/lib/pbx (data); 'dpkg --purge pbx' deletes /etc/pbx"
	;;
0)
	reload_systemd
	say "kept /etc/pbx (configuration) and /var/lib/pbx (data); delete them by hand if no longer needed"
	;;
purge)
	rm -rf /etc/pbx
	say "deleted /etc/pbx; call records, recordings and voicemail are kept in /var/lib/pbx"
	;;
esac
exit 0
