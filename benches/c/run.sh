#!/usr/bin/env bash
# The C API benchmark, one command:
#   1. builds and installs the release libcosid (scripts/install-c) into target/c-bench-prefix;
#   2. runs benches/c/bench_next.c, a standalone C program (cc -O2, through pkg-config): the floor
#      (clock read, compare-and-swap), the peers (libuuid's v1 and v4 UUIDs, when installed),
#      cosid_next per call, cosid_next_batch(4096) per id;
#   3. runs the criterion benchmark `cargo bench -p cosid-ffi --bench c_api`, which measures in
#      one process Rust's Runtime::next(), the extern "C" cosid_next called from Rust, and
#      C-compiled loops (benches/c/loop.c, built here, loaded with dlopen) calling cosid_next and
#      cosid_next_batch through the PLT of the installed libcosid.so;
#   4. prints the interleaved comparison of the three `next` callers (printed by the bench) and
#      criterion's figures as a table: the mean and the best sample (per call or per id).
#
#   benches/c/run.sh            # all
#   benches/c/run.sh --c-only   # only step 2
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
target_dir=${CARGO_TARGET_DIR:-$root/target}
prefix="$target_dir/c-bench-prefix"
PREFIX="$prefix" scripts/install-c >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
rpath="-Wl,-rpath,$(pkg-config --variable=libdir cosid)"
# The peers: util-linux's libuuid (Debian: uuid-dev), when installed.
peer_flags=()
if PKG_CONFIG_PATH="$PKG_CONFIG_PATH:/usr/lib/x86_64-linux-gnu/pkgconfig:/usr/lib/pkgconfig:/usr/share/pkgconfig" \
  pkg-config --exists uuid; then
  # shellcheck disable=SC2207
  peer_flags=(-DCOSID_BENCH_LIBUUID $(PKG_CONFIG_PATH="$PKG_CONFIG_PATH:/usr/lib/x86_64-linux-gnu/pkgconfig:/usr/lib/pkgconfig:/usr/share/pkgconfig" pkg-config --cflags --libs uuid))
else
  echo "libuuid not found (apt-get install uuid-dev): no peer rows"
fi
# shellcheck disable=SC2046
cc -std=c11 -O2 -Wall -Wextra -Werror $(pkg-config --cflags cosid) benches/c/bench_next.c \
  -o "$target_dir/cosid-bench-next" $(pkg-config --libs cosid) "${peer_flags[@]}" "$rpath"
# shellcheck disable=SC2046
cc -std=c11 -O2 -Wall -Wextra -Werror -shared -fPIC $(pkg-config --cflags cosid) benches/c/loop.c \
  -o "$target_dir/libcosid-bench-loop.so" $(pkg-config --libs cosid) "$rpath"

echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$target_dir/cosid-bench-next"
[ "${1:-}" = "--c-only" ] && exit 0

echo
echo "criterion, one process (cargo bench -p cosid-ffi --bench c_api):"
COSID_BENCH_C_LOOP="$target_dir/libcosid-bench-loop.so" \
  cargo bench -p cosid-ffi --bench c_api >"$target_dir/c-bench-criterion.log" 2>&1 ||
  { cat "$target_dir/c-bench-criterion.log" >&2; exit 1; }
echo "machine: load average $(cut -d' ' -f1-3 /proc/loadavg)"
grep -E '^\| ' "$target_dir/c-bench-criterion.log" || true
python3 - "$target_dir/criterion" <<'PY'
import json, os, sys
base = sys.argv[1]
print("\n| benchmark | per | mean ns | best sample ns |\n| --- | --- | ---: | ---: |")
rows = []
for dirpath, _, files in os.walk(base):
    if "sample.json" in files and dirpath.endswith("/new") and "c_api" in dirpath:
        bench = json.load(open(os.path.join(dirpath, "benchmark.json")))
        est = json.load(open(os.path.join(dirpath, "estimates.json")))
        sample = json.load(open(os.path.join(dirpath, "sample.json")))
        per = 1
        tp = bench.get("throughput") or {}
        if "Elements" in tp:
            per = tp["Elements"]
        best = min(t / i for t, i in zip(sample["times"], sample["iters"])) / per
        mean = est["mean"]["point_estimate"] / per
        rows.append((bench["full_id"], "id (CPU)" if per > 1 else "call", mean, best))
for name, per, mean, best in sorted(rows):
    print(f"| `{name}` | {per} | {mean:.2f} | {best:.2f} |")
PY
