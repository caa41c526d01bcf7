#!/usr/bin/env bash
# A prepared device session (one lease, about 9 minutes): the CUDA tests, the MNIST CNN SD pilot on CUDA
# (claims_mnist_pilot, summaries in pilot_gpu/, tarred to $OUT), then the gpu profile's times per step.
# Carry .whl (opacus, pydantic and their pure-Python needs as cp312 wheels) and .devdata (the MNIST mirror and
# nothing else). Once, here, in the repository root:
#   printf '/.whl/\n/.devdata/\n' >> .git/info/exclude; mkdir -p .devdata; cp -r ../shared/datasets/mnist .devdata/
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux2014_x86_64 -d .whl opacus==1.6.0 pydantic==2.14.4 pydantic_core==2.50.5 \
#     annotated-types==0.8.0 typing-inspection==0.4.5 typing_extensions==4.16.0
# Then on the device machine: bash benchmarks/gpu_session.sh (SKIP_CHECK=1 skips the CUDA tests; T_CHECK, T_PILOT,
# T_TIME bound each part in seconds; TIME_ARGS are gpu_timing.py's options). Results go to $OUT.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
export PYTHONUNBUFFERED=1 MKL_CBWR=COMPATIBLE
if [ -d .whl ]; then python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1; fi
export PYTHONPATH=${PYTHONPATH:-$PWD}
PY=${PY:-python3}
[ -n "${OUT:-}" ] || { echo "gpu_session.sh: set OUT (it rewrites params.yaml and results/: run it in a copy, as the device machine does)" >&2; exit 2; }
mkdir -p "$OUT"
export FAIRDP_DATA_MIRROR=$PWD/.devdata
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tail -1
$PY -c "import torch, opacus, pydantic; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'opacus', opacus.__version__)"
git rev-parse HEAD >/dev/null 2>&1 || { git init -q && git add -A >/dev/null 2>&1 && git -c user.email=d@d -c user.name=d commit -qm device; }
el "gpu_check"
[ -n "${SKIP_CHECK:-}" ] || timeout ${T_CHECK:-100} bash tests/gpu_check.sh 2>&1 | tail -15 | tee $OUT/gpu_check.log
el "pilot"
$PY -m fairdp_core.cli use-profile claims_mnist_pilot >/dev/null
$PY - <<'P'
import yaml; p = yaml.safe_load(open("params.yaml")); p["train"]["device"] = __import__("os").environ.get("DEV", "cuda")
open("params.yaml", "w").write(yaml.safe_dump(p, sort_keys=False, width=120))
P
mkdir -p pilot_gpu
cp reports/paper/claims_mnist_pilot_gpu/*.json pilot_gpu/ 2>/dev/null  # runs done in an earlier lease are skipped
timeout ${T_PILOT:-330} $PY -m fairdp_core.cli claims run mnist-cnn-e10 --min-seeds 2 --allow-dirty --quiet --summaries pilot_gpu 2>&1 | grep -v Warning | tail -20 | tee $OUT/pilot.log
tar czf $OUT/pilot_gpu.tgz pilot_gpu results/timings 2>/dev/null
el "timing"
timeout ${T_TIME:-100} $PY benchmarks/gpu_timing.py --device ${DEV:-cuda} --out $OUT ${TIME_ARGS:-} 2>&1 | tail -25 | tee $OUT/timing.log
el "done"
