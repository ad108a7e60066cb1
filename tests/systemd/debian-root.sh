#!/bin/sh
# Builds a minimal Debian bookworm root for the systemd boot test and packs
# it into a tarball: debootstrap (minbase) plus systemd as init, D-Bus for
# systemctl, curl to scrape /metrics from inside, procps. About 40 s and
# 260 MB; the test caches the tarball (see tests/helpers/nspawn.rs).
#   debian-root.sh OUT.tar [MIRROR]
set -eu
out=$1
mirror=${2:-http://deb.debian.org/debian}
work=$(mktemp -d /var/tmp/refreshd-debian-root.XXXXXX)
trap 'rm -rf "$work"' EXIT
debootstrap --variant=minbase \
  --include=systemd,systemd-sysv,dbus,curl,procps,ca-certificates \
  bookworm "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
  tail -20 "$work/debootstrap.log" >&2
  exit 1
}
# A booted container needs a machine id (systemd makes one if empty) and
# nothing that waits for a console login.
: >"$work/root/etc/machine-id"
echo refreshd-test >"$work/root/etc/hostname"
chroot "$work/root" systemctl mask getty@.service console-getty.service \
  systemd-networkd-wait-online.service >/dev/null 2>&1 || true
rm -rf "$work/root/var/cache/apt/archives"/*.deb "$work/root/var/lib/apt/lists"/*
tar -C "$work/root" -cf "$out.tmp" .
mv "$out.tmp" "$out"
