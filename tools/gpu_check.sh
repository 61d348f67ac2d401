#!/usr/bin/env bash
# The GPU lane (issue 32): see tools/gpu_check.py for what it runs and writes.
# On a lent GPU machine, after `bash tools/fetch_gpu_wheels.sh` here:
#     run(command="bash tools/gpu_check.sh", carry=[".whl"], timeout_s=600)
# Here, the same steps on the CPU (no install; a test selection; the bench --quick):
#     JAX_PLATFORMS=cpu bash tools/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" tools/gpu_check.py "$@"
