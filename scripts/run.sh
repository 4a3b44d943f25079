#!/usr/bin/env bash
# run.sh: sets up, builds, and runs normlab with the given arguments (none: the built-in default).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec ./build/normlab "$@"
