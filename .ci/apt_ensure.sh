#!/usr/bin/env bash
# Source this, then `apt_ensure PACKAGE...`: installs the Debian packages that
# are not installed yet (apt-get update at most once per run), so the CI
# scripts that need cross compilers and tools can be rerun at no cost.
apt_ensure() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  if [ -z "${POSEMB_APT_UPDATED:-}" ]; then
    $sudo apt-get update -qq
    export POSEMB_APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
