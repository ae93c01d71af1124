#!/usr/bin/env bash
# run.sh — `make fuzz`: builds the libFuzzer targets in tests/fuzz with clang
# (-fsanitize=fuzzer,address,undefined, straight from the sources they need, not through
# CMake), runs each for FUZZ_SECONDS on a working copy of its seed corpus, and prints the
# executions and findings per target. Exits 1 when any target found something.
# Environment: FUZZ_SECONDS (600), FUZZ_DIR (build-fuzz), FUZZ_CC (clang-14),
# FUZZ_TARGETS ("json safetensors tokens"), FUZZ_PARALLEL (1 when the machine has a core per
# target, else 0: one after another).
# Installs clang-14 and libfuzzer-14-dev with apt-get when either is missing (as root;
# otherwise prints the command and exits 1). Idempotent.
#
# `run.sh replay OUT_DIR` (CTest's test_fuzz_replay) builds the same targets from the same
# sources with $CC (default cc: no clang, no libFuzzer) under ASan and UBSan and a main that
# runs each committed corpus input once (replay.c): the targets keep linking with what they
# fuzz, and every seed and past finding stays a regression test. Exits 1 on any finding.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
mode=fuzz
if [[ ${1:-} == replay ]]; then mode=replay; FUZZ_DIR=${2:?usage: run.sh replay OUT_DIR}; fi
secs=${FUZZ_SECONDS:-600}
out=${FUZZ_DIR:-$root/build-fuzz}
cc=${FUZZ_CC:-clang-14}
read -r -a targets <<< "${FUZZ_TARGETS:-json safetensors tokens}"
cores=$(nproc 2>/dev/null || echo 1)
parallel=${FUZZ_PARALLEL:-$([[ $cores -ge ${#targets[@]} ]] && echo 1 || echo 0)}

# The sources each target needs, beside tests/fuzz/fuzz_<target>.c: only these, so that a
# leaf that grows a dependency shows here (the one list for both modes).
declare -A srcs=(
  [json]="src/json.c"
  [safetensors]="src/json.c src/safetensors.c src/safetensors_write.c src/worker.c io/crc32c.c"
  [tokens]="src/data.c src/util.c io/size.c"
)

if [[ $mode == replay ]]; then
  mkdir -p "$out"
  for t in "${targets[@]}"; do
    s=()
    for f in ${srcs[$t]}; do s+=("$root/$f"); done
    "${CC:-cc}" -std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -Wall -Wextra -Werror \
      -fsanitize=address,undefined -fno-sanitize-recover=undefined -I"$root/src" -I"$root/io" \
      "$root/tests/fuzz/fuzz_$t.c" "$root/tests/fuzz/replay.c" "${s[@]}" -lm -o "$out/replay_$t"
    echo "fuzz replay: $t"
    "$out/replay_$t" "$root/tests/fuzz/corpus/$t" > "$out/replay_$t.log" 2>&1 ||
      { cat "$out/replay_$t.log"; echo "fuzz replay: $t: a finding (above)" >&2; exit 1; }
    tail -1 "$out/replay_$t.log"
  done
  exit 0
fi

# ---------------------------------------------------------------- toolchain
missing=()
for p in clang-14 libfuzzer-14-dev; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "fuzz: missing Debian packages; run: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "fuzz: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# ---------------------------------------------------------------- build
flags=(-std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -Wall -Wextra -Werror
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I"$root/src" -I"$root/io")
declare -A maxlen=([json]=4096 [safetensors]=8192 [tokens]=8192)
mkdir -p "$out"
for t in "${targets[@]}"; do
  [[ -n "${srcs[$t]:-}" ]] || { echo "fuzz: unknown target '$t' (known: ${!srcs[*]})" >&2; exit 2; }
  s=()
  for f in ${srcs[$t]}; do s+=("$root/$f"); done
  echo "fuzz: building fuzz_$t"
  "$cc" "${flags[@]}" "$root/tests/fuzz/fuzz_$t.c" "${s[@]}" -lm -o "$out/fuzz_$t"
done

# ---------------------------------------------------------------- run
# New inputs go to $out/corpus/<t> (the committed seeds stay as they are); crashes, leaks,
# timeouts and OOMs to $out/artifacts/<t>/.
run_one() {
  local t=$1
  mkdir -p "$out/corpus/$t" "$out/artifacts/$t"
  rm -f "$out/artifacts/$t"/*
  "$out/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len="${maxlen[$t]}" \
    -print_final_stats=1 -artifact_prefix="$out/artifacts/$t/" \
    "$out/corpus/$t" "$root/tests/fuzz/corpus/$t" > "$out/$t.log" 2>&1 || true
}
echo "fuzz: running ${targets[*]} for ${secs}s each ($([[ $parallel == 1 ]] && echo "in parallel" || echo "one after another"))"
pids=()
for t in "${targets[@]}"; do
  if [[ $parallel == 1 ]]; then run_one "$t" & pids+=($!); else run_one "$t"; fi
done
for p in "${pids[@]}"; do wait "$p"; done

# ---------------------------------------------------------------- report
found=0
for t in "${targets[@]}"; do
  log="$out/$t.log"
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  [[ -n "$execs" ]] || execs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#')
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  corp=$(find "$out/corpus/$t" -type f | wc -l)
  arts=$(find "$out/artifacts/$t" -type f | wc -l)
  printf 'fuzz: %-12s %12s execs  cov %-6s corpus %-5s findings %s\n' "$t" "${execs:-?}" "${cov:-?}" "$corp" "$arts"
  if [[ $arts -gt 0 ]]; then
    found=1
    find "$out/artifacts/$t" -type f | sed 's/^/fuzz:   /'
    grep -m1 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error' "$log" | sed 's/^/fuzz:   /' || true
  fi
done
[[ $found == 0 ]] || { echo "fuzz: findings above (logs in $out/*.log)"; exit 1; }
echo "fuzz: no findings"
