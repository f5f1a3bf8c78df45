#!/usr/bin/env bash
# A Docker engine with Compose v2 for the container tests and the compose profile. Nothing to do
# when an engine already answers with `docker compose` (Docker Desktop, a rootless or remote
# engine). Otherwise, on Debian bookworm and as root, from Debian's packages alone: the engine
# (`docker.io`), `debootstrap` for scripts/base-image.sh, and Compose v2, which bookworm lacks, as
# the plugin binary of Debian trixie's `docker-compose` package (its signature checked with the
# Debian archive keyring); then `dockerd` started in the background. Compose comes from the Debian
# archive apt uses here (scripts/debian-mirror.sh; MIRROR overrides it), through apt's proxy.
#
#   scripts/container-engine.sh && docker compose version
set -euo pipefail

# shellcheck source=scripts/debian-mirror.sh
source "$(dirname "$0")/debian-mirror.sh"
PLUGINS=/usr/libexec/docker/cli-plugins
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

ready() { docker info > /dev/null 2>&1 && docker compose version > /dev/null 2>&1; }
if ready && command -v debootstrap > /dev/null; then
  echo "engine $(docker version --format '{{.Server.Version}}'), $(docker compose version)"
  exit 0
fi
# shellcheck source=scripts/as-root.sh
source "$(dirname "$0")/as-root.sh"
as_root "$0" "$@"  # root for apt-get

missing=()
command -v dockerd > /dev/null || missing+=(docker.io)
command -v debootstrap > /dev/null || missing+=(debootstrap)
command -v curl > /dev/null || missing+=(curl)
command -v xz > /dev/null || missing+=(xz-utils)
command -v gpgv > /dev/null || missing+=(gpgv)
[[ -f "$KEYRING" ]] || missing+=(debian-archive-keyring)
if ((${#missing[@]})); then
  echo "==> apt-get install ${missing[*]}"
  apt-get update -q > /dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" \
    > /tmp/container-engine-apt.log 2>&1 || { tail -20 /tmp/container-engine-apt.log; exit 1; }
fi

if ! docker compose version > /dev/null 2>&1; then
  MIRROR="$(debian_mirror)"
  apt_proxy
  echo "==> Compose v2 from Debian trixie's docker-compose package ($MIRROR)"
  arch="$(dpkg --print-architecture)"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  # the chain of trust apt follows: the signed release file, the package index's hash in it,
  # the package's hash in the index
  curl -fsSL -o "$work/InRelease" "$MIRROR/dists/trixie/InRelease"
  gpgv --keyring "$KEYRING" --output "$work/Release" "$work/InRelease" 2> /dev/null \
    || { echo "trixie's InRelease does not verify against $KEYRING" >&2; exit 1; }
  index="main/binary-$arch/Packages.xz"
  index_sha="$(awk -v f="$index" '/^SHA256:/{s=1; next} /^[A-Za-z]/{s=0} s && $3 == f {print $1}' \
    "$work/Release")"
  curl -fsSL -o "$work/Packages.xz" "$MIRROR/dists/trixie/$index"
  echo "$index_sha  $work/Packages.xz" | sha256sum --check --quiet
  xz -d "$work/Packages.xz"
  entry="$(awk '/^Package: docker-compose$/{p=1} p&&/^$/{exit} p' "$work/Packages")"
  file="$(awk '/^Filename:/{print $2}' <<< "$entry")"
  sha="$(awk '/^SHA256:/{print $2}' <<< "$entry")"
  [[ -n "$file" && -n "$sha" ]] || { echo "no docker-compose in trixie's $index" >&2; exit 1; }
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
