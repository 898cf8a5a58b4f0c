#!/usr/bin/env sh
# The whole quality benchmark on the dev files (../shared/data): writes benchmarks/results/.
# Usage: benchmarks/run.sh [--only main,alpha,analyzer,embedders,report] [--data-dir DIR]
set -eu
cd "$(dirname "$0")/.."
exec python -m benchmarks "$@"
