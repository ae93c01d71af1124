#!/usr/bin/env bash
# Installs the Debian packages tiertrain builds and tests with, when any is missing.
# Idempotent: a machine that has them all does nothing. As root it runs apt-get; otherwise
# it prints the one command to run and exits non-zero.
# --browser: also Debian's chromium, for the report's browser test (test_report_browser skips
# without it), best effort: a failure to install it is said and is not an error.
set -euo pipefail
if [[ "${1:-}" == "--browser" ]]; then
  status=$(dpkg-query -W -f='${Status}' chromium 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    if [[ $(id -u) -eq 0 ]]; then
      echo "tiertrain: installing chromium (the report's browser test)" >&2
      (export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium) ||
        echo "tiertrain: chromium did not install; test_report_browser will skip" >&2
    else
      echo "tiertrain: no chromium; test_report_browser will skip (sudo apt-get install -y chromium)" >&2
    fi
  fi
fi
pkgs=(build-essential cmake pkg-config liburing-dev libnuma-dev libhwloc-dev check libopenblas-dev openmpi-bin libopenmpi-dev)
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
