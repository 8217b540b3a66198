#!/usr/bin/env bash
# Builds the GoogleTest binaries with AddressSanitizer into build-asan/ (CPU
# backend only, no benchmarks) and runs each of them. Extra arguments name the
# test binaries to build and run (default: all of them). Not part of tools/test.sh:
# the instrumented build takes as long again as the plain one.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
if [ ! -f build-asan/build.ninja ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_WITH_CUDA=OFF \
    -DLOOM_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS="-fsanitize=address -fno-omit-frame-pointer -O1" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address" >/dev/null
fi
tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then
  tests=(ir_test smt_test models_test transform_test schedule_test verify_test exec_test)
fi
jobs=$(nproc 2>/dev/null || echo 2)
ninja -C build-asan -j "$jobs" "${tests[@]}"
status=0
for t in "${tests[@]}"; do
  echo "== $t"
  ASAN_OPTIONS=detect_leaks=0 "build-asan/tests/$t" --gtest_brief=1 || status=1
done
exit $status
