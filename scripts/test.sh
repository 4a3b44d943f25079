#!/usr/bin/env bash
# test.sh: sets up (with the test oracles), builds, and runs every test with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
cd build
ctest --output-on-failure --timeout 1500 -j 1 "$@"
