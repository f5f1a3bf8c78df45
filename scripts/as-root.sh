# shellcheck shell=bash
# Sourced by the scripts that install packages or build a root file system: `as_root "$0" "$@"`
# goes on as it is when root already, re-runs the script through sudo where sudo is there (a
# machine logged into as root has none, and needs none), and otherwise stops saying why.
as_root() {
  [[ "$(id -u)" == 0 ]] && return 0
  if command -v sudo > /dev/null; then
    echo "==> $(basename "$1") needs root: sudo bash $*" >&2
    exec sudo --preserve-env=MIRROR,http_proxy,https_proxy,no_proxy -- bash "$@"
  fi
  echo "$(basename "$1") needs root and there is no sudo here: run it as root" >&2
  exit 1
}
