#!/usr/bin/env bash
# The CUDA checks, as one prepared script for a GPU machine (CI has none; there these tests skip).
# Usage, from the repository root on a machine with CUDA and the project's dependencies installed:
#   bash tests/gpu_check.sh
# It fails when no GPU is visible (so that a skip is never mistaken for a pass), then runs every CUDA test plus the
# device-placement check and the sharded banks on CUDA (tests/test_shard.py), and prints pytest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu_check: no CUDA device visible')"
python3 -m pytest -q -p no:cacheprovider -rs tests/test_privacy.py tests/test_rivals.py tests/test_shard.py \
    -k "cuda or device" "$@"
