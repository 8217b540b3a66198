#!/usr/bin/env bash
# Configures and builds Loom into build/ (Release with debug info, Ninja).
# Extra arguments are Ninja targets (default: everything).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
elif [ -x .venv/bin/python3 ] &&
     grep -q '^Python_EXECUTABLE:FILEPATH=/usr/bin/python3$' build/CMakeCache.txt; then
  # A build configured before tools/setup.sh made .venv: build the Python
  # package for the project's environment from now on.
  cmake -S . -B build -DPython_EXECUTABLE="$PWD/.venv/bin/python3" >/dev/null
fi
jobs=$(nproc 2>/dev/null || echo 2)
ninja -C build -j "$jobs" "$@"
