#!/usr/bin/env bash
# io_vs_fio.sh — tiertrain's io engine against fio on the same directory, size, block size
# and queue depth, alternating the two tools for several rounds (the disks this runs on
# are noisy: only ratios taken back to back mean anything), then each pattern's median
# ratio tiertrain / fio. Patterns run in the order `tiertrain bench io` runs them: seq
# write on a fresh preallocated file, seq read, random write, random read (each block
# once). fio gets ioengine=io_uring, direct=1 and, as root, registered buffers and files
# (tiertrain registers both too).
# Buffers matter on virtual disks: tiertrain's come from its host pool, backed by 2 MiB
# transparent huge pages, so a 1 MiB request is one physically contiguous segment; fio's
# default malloc buffers are 4 KiB pages, 256 segments per 1 MiB, which a virtio disk
# with max_segments 254 splits in two. --fio-iomem mmaphuge gives fio hugetlb buffers
# too (needs reserved pages: sysctl vm.nr_hugepages=N, checked below).
#
# Usage: bench/io_vs_fio.sh [--size 2G] [--nvme-path DIR] [--io-block 1M] [--nvme-qd 32]
#                           [--rounds 3] [--io-engine auto|uring|psync] [--fio-iomem malloc|mmaphuge]
# Env:   TIERTRAIN  the binary (default: build/tiertrain next to this script's repo)
#        FIO_OPTS   extra fio options (default as root: --fixedbufs=1 --registerfiles=1)
# Output: a line per round and tool, a table of medians, and as the last line one JSON
#   {"bench":"io_vs_fio","rounds":3,"seq_read_ratio":…,"seq_write_ratio":…,"rand_read_ratio":…,"rand_write_ratio":…}
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
size=2G dir=${TMPDIR:-/tmp} bs=1M qd=32 rounds=3 engine=auto iomem=malloc
while [[ $# -gt 0 ]]; do
  case "$1" in
    --size) size=$2; shift 2 ;;
    --nvme-path) dir=$2; shift 2 ;;
    --io-block) bs=$2; shift 2 ;;
    --nvme-qd) qd=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --io-engine) engine=$2; shift 2 ;;
    --fio-iomem) iomem=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "io_vs_fio.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
tt=${TIERTRAIN:-$here/build/tiertrain}
command -v fio >/dev/null || { echo "io_vs_fio.sh: fio not found: apt-get install -y fio" >&2; exit 2; }
command -v python3 >/dev/null || { echo "io_vs_fio.sh: python3 not found (parses the JSON)" >&2; exit 2; }
[[ -x "$tt" ]] || { echo "io_vs_fio.sh: $tt is not built: run make (or set TIERTRAIN)" >&2; exit 2; }
[[ -d "$dir" ]] || { echo "io_vs_fio.sh: --nvme-path $dir: not a directory" >&2; exit 2; }
if [[ -z "${FIO_OPTS+x}" ]]; then
  if [[ $(id -u) -eq 0 ]]; then FIO_OPTS="--fixedbufs=1 --registerfiles=1"; else FIO_OPTS=""; fi
fi

if [[ "$iomem" == *huge* ]]; then
  # fio's buffers: qd blocks, plus alignment; in 2 MiB hugetlb pages
  need=$(python3 -c 'import sys
def b(s):
    m={"K":1<<10,"M":1<<20,"G":1<<30}; s=s.upper().rstrip("IB").rstrip("B")
    return int(float(s[:-1])*m[s[-1]]) if s[-1] in m else int(s)
print((b(sys.argv[1])*int(sys.argv[2]) >> 21) + 2)' "$bs" "$qd")
  free_pages=$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)
  if ((free_pages < need)); then
    echo "io_vs_fio.sh: --fio-iomem $iomem needs $need free 2 MiB huge pages, $free_pages reserved: run sysctl vm.nr_hugepages=$need (as root) first" >&2
    exit 2
  fi
fi

fio_file="$dir/tt_fio.$$.dat"
work=$(mktemp -d)
trap 'rm -f "$fio_file"; rm -rf "$work"' EXIT

# fio: the four patterns in tiertrain's order; prints "seq_write seq_read rand_write rand_read" in bytes/s
run_fio() {
  rm -f "$fio_file"
  local out=()
  for rw in write read randwrite randread; do
    # shellcheck disable=SC2086
    fio --name="tt_$rw" --filename="$fio_file" --size="$size" --bs="$bs" --iodepth="$qd" \
        --ioengine=io_uring --direct=1 --rw="$rw" --numjobs=1 --fallocate=native --iomem="$iomem" \
        --output-format=json $FIO_OPTS >"$work/fio_$rw.json"
    out+=("$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))["jobs"][0]; print(j[sys.argv[2]]["bw_bytes"])' \
             "$work/fio_$rw.json" "$([[ $rw == *read ]] && echo read || echo write)")")
  done
  rm -f "$fio_file"
  echo "${out[*]}"
}

# tiertrain: the same four, from the last (JSON) line of `bench io`; bytes/s
run_tt() {
  "$tt" bench io --size "$size" --nvme-path "$dir" --io-block "$bs" --nvme-qd "$qd" --io-engine "$engine" \
    >"$work/tt.out" 2>"$work/tt.err" || { cat "$work/tt.err" >&2; echo "io_vs_fio.sh: tiertrain bench io failed" >&2; exit 1; }
  tail -n 1 "$work/tt.out" | python3 -c 'import json,sys; j=json.loads(sys.stdin.read())
print(" ".join(str(j[k]*1e9) for k in ("seq_write_GBps","seq_read_GBps","rand_write_GBps","rand_read_GBps")))'
}

gb() { python3 -c 'import sys; print(" ".join("%6.3f" % (float(x)/1e9) for x in sys.argv[1:]))' "$@"; }

echo "io_vs_fio: $rounds rounds, size $size, block $bs, qd $qd, dir $dir, fio iomem $iomem, fio opts '${FIO_OPTS}', tiertrain $tt --io-engine $engine"
echo "round tool       seq_write seq_read rand_write rand_read   (GB/s)"
: >"$work/ratios"
for ((r = 1; r <= rounds; r++)); do
  # alternate which tool goes first, so drift in the disk's speed does not favour one
  if ((r % 2)); then f=$(run_fio); t=$(run_tt); else t=$(run_tt); f=$(run_fio); fi
  printf '%-5s %-10s %s\n' "$r" fio "$(gb $f)"
  printf '%-5s %-10s %s\n' "$r" tiertrain "$(gb $t)"
  python3 -c 'import sys; f=[float(x) for x in sys.argv[1].split()]; t=[float(x) for x in sys.argv[2].split()]
print(" ".join("%.4f" % (b/a if a > 0 else 0) for a, b in zip(f, t)))' "$f" "$t" >>"$work/ratios"
done

python3 - "$work/ratios" "$rounds" "$iomem" <<'EOF'
import json, statistics, sys
rows = [[float(x) for x in line.split()] for line in open(sys.argv[1]) if line.strip()]
names = ["seq_write", "seq_read", "rand_write", "rand_read"]
med = {n: statistics.median(r[i] for r in rows) for i, n in enumerate(names)}
print("median ratio tiertrain/fio: " + "  ".join("%s %.3f" % (n, med[n]) for n in names))
out = {"bench": "io_vs_fio", "rounds": int(sys.argv[2]), "fio_iomem": sys.argv[3]}
for n in ["seq_read", "seq_write", "rand_read", "rand_write"]:
    out[n + "_ratio"] = round(med[n], 4)
print(json.dumps(out, separators=(",", ":")))
EOF
