#!/usr/bin/env bash
# Installs the Debian packages tiertrain builds and tests with, when any is missing.
# Idempotent: a machine that has them all does nothing. As root it runs apt-get; otherwise
# it prints the one command to run and exits non-zero.
set -euo pipefail
pkgs=(build-essential cmake pkg-config liburing-dev libnuma-dev libhwloc-dev check libopenblas-dev)
missing=()
for p in "${pkgs[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
if [[ $(id -u) -ne 0 ]]; then
  echo "tiertrain: missing Debian packages; run: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "tiertrain: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
