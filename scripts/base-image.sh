#!/usr/bin/env bash
# A Debian bookworm base image with Python 3.11, made from Debian's packages alone, for machines
# that reach Debian's and Python's package registries but no image registry:
#
#   scripts/base-image.sh                  # builds trainyard-base:bookworm (kept when present)
#   scripts/base-image.sh --rebuild
#   docker build -f containers/Dockerfile --build-arg BASE_IMAGE=trainyard-base:bookworm ...
#
# Needs root, debootstrap and a running Docker engine. Debian's packages come from the archive apt
# uses on this machine (scripts/debian-mirror.sh), through apt's proxy; MIRROR overrides it.
set -euo pipefail

IMAGE="${IMAGE:-trainyard-base:bookworm}"
# shellcheck source=scripts/debian-mirror.sh
source "$(dirname "$0")/debian-mirror.sh"

if [[ "${1:-}" != "--rebuild" ]] && docker image inspect "$IMAGE" > /dev/null 2>&1; then
  echo "$IMAGE is already built (--rebuild to make it again)"
  exit 0
fi

# shellcheck source=scripts/as-root.sh
source "$(dirname "$0")/as-root.sh"
as_root "$0" "$@"  # root for debootstrap and chroot
MIRROR="$(debian_mirror)"
apt_proxy
root="$(mktemp -d)"
trap 'rm -rf "$root" "$root.log"' EXIT
echo "==> debootstrap bookworm from $MIRROR into $root"
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
  bookworm "$root" "$MIRROR" > "$root.log" 2>&1 || { tail -20 "$root.log"; exit 1; }
# what python:3.11-slim offers that the images use: `python` on PATH, no package caches
chroot "$root" ln -sf /usr/bin/python3 /usr/local/bin/python
# the certificate authorities this machine adds to Debian's (a proxy's, a company's): the image
# reaches the package registries the way this machine does
if compgen -G "/usr/local/share/ca-certificates/*.crt" > /dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  chroot "$root" update-ca-certificates > /dev/null
fi
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/usr/share/doc/* \
  "$root"/usr/share/man/*
echo "==> docker import as $IMAGE"
tar -C "$root" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
  --change 'ENV REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt' \
  --change 'CMD ["python3"]' \
  - "$IMAGE"
docker image ls "$IMAGE"
