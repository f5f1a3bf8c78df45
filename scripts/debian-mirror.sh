#!/usr/bin/env bash
# The Debian archive this machine's apt uses, for scripts that fetch from it themselves
# (scripts/base-image.sh, scripts/container-engine.sh). Sourced, it defines:
#
#   debian_mirror   prints $MIRROR when set, else the first archive (not a security one) of a
#                   `deb` source of a Debian release in apt's sources: the deb822 files
#                   (sources.list.d/*.sources) and the one-line ones (sources.list, *.list)
#   apt_proxy       exports http_proxy/https_proxy from apt's Acquire::http(s)::Proxy when the
#                   environment sets none, so curl and debootstrap go the way apt goes
#
#   scripts/debian-mirror.sh               # prints the mirror it finds
#   MIRROR=http://mirror.example/debian scripts/debian-mirror.sh
set -euo pipefail

APT_SOURCES="${APT_SOURCES:-/etc/apt}"

_apt_archives() { # every "URI suite" pair of a `deb` source, in apt's order
  local dir="$APT_SOURCES"
  local files=()
  [[ -f "$dir/sources.list" ]] && files+=("$dir/sources.list")
  local f
  for f in "$dir"/sources.list.d/*.list "$dir"/sources.list.d/*.sources; do
    [[ -f "$f" ]] && files+=("$f")
  done
  ((${#files[@]})) || return 0
  awk '
    function flush() {
      if (types ~ /(^| )deb( |$)/ && enabled != "no")
        for (u = 1; u <= nu; u++) for (s = 1; s <= ns; s++) print uris[u], suites[s]
      types = ""; enabled = ""; nu = 0; ns = 0
    }
    FNR == 1 { flush(); deb822 = FILENAME ~ /\.sources$/ }
    /^[[:space:]]*#/ { next }
    deb822 && /^[[:space:]]*$/ { flush(); next }
    deb822 {
      key = tolower($1); sub(/:$/, "", key)
      $1 = ""; sub(/^ +/, "")
      if (key == "types") types = $0
      else if (key == "enabled") enabled = tolower($0)
      else if (key == "uris") nu = split($0, uris, " ")
      else if (key == "suites") ns = split($0, suites, " ")
      next
    }
    $1 == "deb" {
      i = 2
      if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
      print $i, $(i + 1)
    }
    END { flush() }
  ' "${files[@]}"
}

debian_mirror() {
  if [[ -n "${MIRROR:-}" ]]; then
    echo "${MIRROR%/}"
    return 0
  fi
  local uri suite
  while read -r uri suite; do
    # a release's own suite (bookworm, trixie, stable), not -updates, -security or -backports
    if [[ "$suite" != *-* && "$suite" != */* && "${uri%/}" != *-security ]]; then
      echo "${uri%/}"
      return 0
    fi
  done < <(_apt_archives)
  echo "no Debian archive among apt's sources under $APT_SOURCES; set MIRROR to one" \
    "(the folder holding dists/ and pool/)" >&2
  return 1
}

apt_proxy() {
  command -v apt-config > /dev/null || return 0
  local HTTP_PROXY_APT="" HTTPS_PROXY_APT=""
  eval "$(apt-config shell HTTP_PROXY_APT Acquire::http::Proxy HTTPS_PROXY_APT Acquire::https::Proxy)"
  if [[ -z "${http_proxy:-}" && -n "$HTTP_PROXY_APT" && "$HTTP_PROXY_APT" != DIRECT ]]; then
    export http_proxy="$HTTP_PROXY_APT"
  fi
  if [[ -z "${https_proxy:-}" && -n "$HTTPS_PROXY_APT" && "$HTTPS_PROXY_APT" != DIRECT ]]; then
    export https_proxy="$HTTPS_PROXY_APT"
  fi
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  debian_mirror
fi
