#!/usr/bin/env bash
# Download, here (where pip reaches a registry), the wheels the GPU lane installs on a lent
# GPU machine, which has no network: the project's dependencies that its image lacks, as
# Python 3.12 x86-64 wheels (pure-Python or cp312 manylinux), into .whl/ (git-ignored; the
# device call carries it: run(command="bash tools/gpu_check.sh", carry=[".whl"])).
#
# The image (/work/.library/device/KINDS.md) already holds Python 3.12, jax 0.11.2 with CUDA,
# flax, optax, orbax, torch, transformers, numba, tokenizers, safetensors, grpcio, protobuf,
# typer, rich, httpx, pytest, hypothesis, pandas, ... What it lacks is listed in WHEELS below.
# Each is fetched at the version installed in the Python that runs this script when it has
# one (the versions this project is tested with), else at the registry's newest for 3.12.
# grpcio-tools must not be newer than the image's grpcio (the stubs it generates check that)
# and must accept the image's protobuf, neither of which is known here: several versions
# are fetched and tools/gpu_check.sh installs the newest that fits. `--no-deps`: every needed
# dependency is named here; tools/gpu_check.sh reports any import that still fails.
#
#     bash tools/fetch_gpu_wheels.sh [DEST]      # default .whl; about 20 MiB
set -euo pipefail
cd "$(dirname "$0")/.."
DEST="${1:-.whl}"
PY="${PYTHON:-python3}"
mkdir -p "$DEST"

# the project's runtime, test and bench dependencies missing from the image, and their own
WHEELS=(
  datasets dill multiprocess                       # trainer: data loading
  tensorboardX                                     # trainer: logging
  fastapi starlette pydantic pydantic-core annotated-types typing-inspection  # inference HTTP
  opentelemetry-api                                # fastapi >= 0.16x imports it
  uvicorn openai distro jiter sniffio              # inference serve, the OpenAI client (tests)
  httpx2 httpcore2 truststore                      # openai >= 3.5x imports httpx2
  ase                                              # tests: MD file round trips
  jax-md e3nn-jax jraph ml-collections             # bench: the jax-md EAM baseline
)
# newest first; gpu_check.sh picks one (the image held grpcio 1.84.0 on 2026-11-27)
GRPC_TOOLS=(1.85.1 1.84.0 1.80.0 1.76.0 1.72.1)

PLATFORMS=()
for n in 17 24 27 28 31 34 35; do PLATFORMS+=(--platform "manylinux_2_${n}_x86_64"); done
PLATFORMS+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)

fetch() {  # NAME==VERSION or NAME
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --abi abi3 --abi none "${PLATFORMS[@]}" -d "$DEST" "$1"
}

for name in "${WHEELS[@]}"; do
  version=$("$PY" -c "import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: pass" "$name")
  if [ -n "$version" ] && fetch "$name==$version" 2>/dev/null; then
    echo "$name==$version"
  else
    fetch "$name" && echo "$name (newest for Python 3.12)"
  fi
done
for v in "${GRPC_TOOLS[@]}"; do  # grpcio-health-checking pins grpcio as grpcio-tools does
  fetch "grpcio-tools==$v" && echo "grpcio-tools==$v"
  fetch "grpcio-health-checking==$v" && echo "grpcio-health-checking==$v"
done
du -sh "$DEST"
