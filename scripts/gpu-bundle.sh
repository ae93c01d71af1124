#!/usr/bin/env bash
# gpu-bundle.sh — fetches the Debian packages tiertrain builds against that a bare GPU box
# (CUDA 13, cmake, gcc; no network, no Debian archive) may lack, into gpu-bundle/ at the
# repository root (git-ignored), for bench/gpu_check.sh to unpack there with dpkg -x.
#
# Run it here, on a machine with the Debian archive: `apt-get download` of each package
# (the candidate version of this machine's archive, this machine's architecture), no root
# needed unless the package lists are missing (then `apt-get update` runs once, as root).
# Idempotent: packages already present at the candidate version are not fetched again;
# other versions of the same packages are removed; MANIFEST lists what is there (name,
# version, architecture, sha256). Fails, naming the package, when one cannot be fetched,
# and when the bundle grows past 50 MiB.
#
# The set: liburing, libnuma, hwloc, check (with subunit), OpenBLAS (the pthread flavour:
# dev, runtime, and its libgfortran5/libquadmath0), and pkgconf (pkg-config) in case the box
# has none. Everything else (libc, libgcc, libudev, the kernel headers) is taken from the box.
# The libraries are Debian's build (this machine: see MANIFEST); gpu_check.sh reports when
# the box's C library is older than they need.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/gpu-bundle"
max_bytes=$((50 * 1024 * 1024))
pkgs=(
  liburing-dev liburing2
  libnuma-dev libnuma1
  libhwloc-dev libhwloc15
  check libsubunit-dev libsubunit0
  libopenblas-dev libopenblas0 libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libquadmath0
  pkg-config pkgconf pkgconf-bin libpkgconf3
)

die() { echo "gpu-bundle: $*" >&2; exit 1; }
command -v apt-get >/dev/null && command -v apt-cache >/dev/null || die "needs apt-get and apt-cache (a Debian/Ubuntu machine with its archive)"

# name -> "version arch" of the candidate; empty when apt does not know the package
candidate() {
  apt-cache show --no-all-versions "$1" 2>/dev/null |
    awk -F': ' '/^Version:/ {v=$2} /^Architecture:/ {a=$2} END {if (v != "") print v, a}'
}
# apt-get download's file name: name_version_arch.deb, with the epoch's ':' as %3a
debname() { echo "${1}_${2//:/%3a}_${3}.deb"; }

if [[ -z "$(candidate "${pkgs[0]}")" ]]; then
  if [[ $(id -u) -eq 0 ]]; then
    echo "gpu-bundle: package lists missing; running apt-get update" >&2
    apt-get update -qq
  else
    die "apt does not know ${pkgs[0]}: run 'sudo apt-get update' first"
  fi
fi

mkdir -p "$dest"
cd "$dest"
want=() need=()
for p in "${pkgs[@]}"; do
  read -r ver arch < <(candidate "$p") || true
  [[ -n "${ver:-}" ]] || die "apt knows no package '$p' (is the archive in sources.list, and the lists updated?)"
  f=$(debname "$p" "$ver" "$arch")
  want+=("$f")
  if [[ -s "$f" ]] && dpkg-deb --info "$f" >/dev/null 2>&1; then continue; fi
  rm -f "$f"
  need+=("$p")
done
if (( ${#need[@]} )); then
  echo "gpu-bundle: fetching ${need[*]}" >&2
  # (as root apt warns that its _apt user cannot write here and downloads unsandboxed: harmless)
  apt-get download "${need[@]}" >/dev/null 2> >(grep -v 'unsandboxed' >&2) || die "apt-get download failed for: ${need[*]}"
fi
for f in "${want[@]}"; do
  [[ -s "$f" ]] || die "expected $f after apt-get download; it is not there"
done
# stale versions of these packages (and anything else that is not in the set) go
for f in *.deb; do
  keep=0
  for w in "${want[@]}"; do [[ "$f" == "$w" ]] && keep=1 && break; done
  (( keep )) || { echo "gpu-bundle: removing $f (not in the current set)" >&2; rm -f -- "$f"; }
done
{
  echo "# gpu-bundle MANIFEST: name version arch sha256 (from $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"))"
  for f in "${want[@]}"; do
    printf '%s %s %s %s\n' "$(dpkg-deb -f "$f" Package)" "$(dpkg-deb -f "$f" Version)" "$(dpkg-deb -f "$f" Architecture)" \
      "$(sha256sum "$f" | cut -d' ' -f1)"
  done
} > MANIFEST
bytes=$(du -cb -- *.deb | tail -1 | cut -f1)
(( bytes <= max_bytes )) || die "the bundle is $((bytes / 1024 / 1024)) MiB, over the 50 MiB limit"
echo "gpu-bundle: ${#want[@]} packages, $(du -sh . | cut -f1) in $dest" >&2
