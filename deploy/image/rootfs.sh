#!/bin/sh
# rootfs.sh BUSYBOX DIR: lay out in DIR the image's root file system but
# /jobdir: a static busybox as /bin/busybox with a link for each of its
# commands (/bin/sh among them), /etc/passwd and /etc/group naming root and
# the jobdir user (10001), and /tmp. make image runs it on the host, the
# Containerfile's from-source target in a Debian image.
set -eu
busybox=$1
dir=$2
# A dynamically linked busybox would not run on scratch, which has no libc.
if command -v ldd >/dev/null && ldd "$busybox" >/dev/null 2>&1; then
	echo "rootfs.sh: $busybox is dynamically linked; install Debian's busybox-static" >&2
	exit 1
fi
mkdir -p "$dir/bin" "$dir/etc" "$dir/tmp"
chmod 0755 "$dir" "$dir/bin" "$dir/etc"
chmod 1777 "$dir/tmp"
cp "$busybox" "$dir/bin/busybox"
chmod 0755 "$dir/bin/busybox"
for applet in $("$busybox" --list); do
	case $applet in busybox) continue ;; esac
	ln -sf busybox "$dir/bin/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\njobdir:x:10001:10001:jobdir:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$dir/etc/passwd"
printf 'root:x:0:\njobdir:x:10001:\nnogroup:x:65534:\n' >"$dir/etc/group"
chmod 0644 "$dir/etc/passwd" "$dir/etc/group"
