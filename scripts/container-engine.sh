#!/usr/bin/env bash
# A Docker engine on a Debian bookworm machine without one, from Debian's packages alone: the
# engine (`docker.io`), `debootstrap` for scripts/base-image.sh, and Compose v2 (`docker compose`),
# which bookworm lacks, as the plugin binary of Debian trixie's `docker-compose` package. Starts
# `dockerd` when no engine answers. Needs root; does nothing that is already done.
#
#   sudo scripts/container-engine.sh && docker compose version
set -euo pipefail

MIRROR="${MIRROR:-http://deb.debian.org/debian}"
PLUGINS=/usr/libexec/docker/cli-plugins

missing=()
command -v dockerd > /dev/null || missing+=(docker.io)
command -v debootstrap > /dev/null || missing+=(debootstrap)
if ((${#missing[@]})); then
  echo "==> apt-get install ${missing[*]}"
  apt-get update -q > /dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" \
    > /tmp/container-engine-apt.log 2>&1 || { tail -20 /tmp/container-engine-apt.log; exit 1; }
fi

if ! docker compose version > /dev/null 2>&1; then
  echo "==> Compose v2 from Debian trixie's docker-compose package"
  packages="$(curl -fsSL "$MIRROR/dists/trixie/main/binary-amd64/Packages.xz" | xz -d)"
  entry="$(awk '/^Package: docker-compose$/{p=1} p&&/^$/{exit} p' <<< "$packages")"
  file="$(awk '/^Filename:/{print $2}' <<< "$entry")"
  sha="$(awk '/^SHA256:/{print $2}' <<< "$entry")"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  curl -fsSL -o "$work/compose.deb" "$MIRROR/$file"
  echo "$sha  $work/compose.deb" | sha256sum --check --quiet
  dpkg-deb -x "$work/compose.deb" "$work/root"
  install -D -m 0755 "$work/root$PLUGINS/docker-compose" "$PLUGINS/docker-compose"
fi

if ! docker info > /dev/null 2>&1; then
  echo "==> starting dockerd (log: /var/log/dockerd.log)"
  nohup dockerd > /var/log/dockerd.log 2>&1 &
  for _ in $(seq 60); do
    docker info > /dev/null 2>&1 && break
    sleep 1
  done
  docker info > /dev/null 2>&1 || { tail -20 /var/log/dockerd.log; exit 1; }
fi
echo "engine $(docker version --format '{{.Server.Version}}'), $(docker compose version)"
