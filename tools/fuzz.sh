#!/usr/bin/env bash
# Fuzzes Loom's readers of untrusted input with libFuzzer (fuzz/fuzz_targets.h), outside
# the main test command: installs Clang if missing, builds the fuzz targets with
# AddressSanitizer and UndefinedBehaviorSanitizer into build-fuzz/, and runs each for
# SECONDS (default 600) on a copy of its seed corpus (fuzz/corpus/<target>/).
#
#   tools/fuzz.sh [SECONDS] [TARGET ...]     targets: graph_text graph_json plan_json
#                                            train_config block_model schedule_json
#                                            torch_csv proof_cache (default: all)
#
# Prints each target's executions per second, coverage and findings; what crashed or
# hung is in build-fuzz/findings/<target>/ (add the reproducer to fuzz/corpus/<target>/
# once fixed: the replay test keeps it fixed). Exits 1 if any target found something.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(graph_text graph_json plan_json train_config block_model schedule_json torch_csv
           proof_cache)
fi
if ! command -v clang++-14 >/dev/null || [ ! -e /usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q clang-14=1:14.0.6-12 \
    libclang-rt-14-dev=1:14.0.6-12 >/dev/null
fi
bash tools/setup.sh >/dev/null
if [ ! -f build-fuzz/build.ninja ]; then
  CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DLOOM_FUZZ=ON -DLOOM_BUILD_TESTS=OFF -DLOOM_BUILD_BENCH=OFF -DLOOM_WITH_CUDA=OFF >/dev/null
fi
jobs=$(nproc 2>/dev/null || echo 2)
ninja -C build-fuzz -j "$jobs" "${targets[@]/%/_fuzzer}" >/dev/null
found=0
printf '%-14s %8s %10s %8s %8s %s\n' target seconds execs/s cov ft findings
for t in "${targets[@]}"; do
  work=build-fuzz/corpus/$t
  findings=build-fuzz/findings/$t
  mkdir -p "$work" "$findings"
  cp -n fuzz/corpus/"$t"/* "$work"/ 2>/dev/null || true
  log=build-fuzz/findings/$t.log
  start=$(date +%s)
  set +e
  ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
    build-fuzz/fuzz/"$t"_fuzzer "$work" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
      -max_len=65536 -artifact_prefix="$findings/" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  elapsed=$(( $(date +%s) - start ))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  speed=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo 0)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo 0)
  n=$(find "$findings" -type f | wc -l)
  [ "$rc" -ne 0 ] || [ "$n" -ne 0 ] && found=1
  printf '%-14s %8s %10s %8s %8s %s\n' "$t" "$elapsed" "$speed" "$cov" "$ft" \
    "$n (exit $rc, $execs runs; log $log)"
done
exit $found
