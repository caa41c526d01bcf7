#!/usr/bin/env bash
# A prepared device session (one lease, about 9 minutes): the CUDA tests, an SD pilot on CUDA (PILOT_PROFILE,
# default claims_mnist_pilot, part PILOT_PART, default mnist-cnn-e10; summaries written straight to $OUT/pilot, so a
# lease cut short still returns the runs done; runs already in PILOT_DONE, default
# reports/paper/<PILOT_PROFILE>_gpu, are skipped), then the gpu profile's times per step.
# UTKFace's pilot: PILOT_PROFILE=claims_utkface_pilot PILOT_PART=utkface-cnn-e10 WORKERS=4 SKIP_CHECK=1 T_TIME=0
# T_PILOT=480 (a bank cut short by the limit loses its work, so give the pilot most of the lease),
# with .devdata holding the UTKFace mirror alone (the MNIST one as well would pass the 64 MiB the lease carries).
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
PROFILE=${PILOT_PROFILE:-claims_mnist_pilot}
$PY -m fairdp_core.cli use-profile $PROFILE >/dev/null
# execution knobs (no plan hash holds them): the device (a key the profiles leave unset, so `fairdp set` cannot
# reach it), and the worker processes a bank is sharded over
$PY - <<'P'
import yaml; p = yaml.safe_load(open("params.yaml")); p["train"]["device"] = __import__("os").environ.get("DEV", "cuda")
open("params.yaml", "w").write(yaml.safe_dump(p, sort_keys=False, width=120))
P
$PY -m fairdp_core.cli set compute.workers=${WORKERS:-2} || exit 1
mkdir -p $OUT/pilot
cp ${PILOT_DONE:-reports/paper/${PROFILE}_gpu}/*.json $OUT/pilot/ 2>/dev/null  # runs done in an earlier lease are skipped
pilot() { timeout $1 $PY -m fairdp_core.cli claims run ${PILOT_PART:-mnist-cnn-e10} --min-seeds 2 --allow-dirty --quiet \
  --summaries $OUT/pilot 2>&1 | grep --line-buffered -v Warning | tee -a $OUT/pilot.log | tail -20; return ${PIPESTATUS[0]}; }
TP=$(( $(date +%s) + ${T_PILOT:-330} ))
pilot ${T_PILOT:-330}; rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "${WORKERS:-2}" != 1 ]; then  # sharding failed here: one process instead
  left=$(( TP - $(date +%s) ))
  el "pilot failed (rc $rc) with ${WORKERS:-2} workers; again with 1 ($left s left)"
  if [ "$left" -gt 30 ]; then  # `timeout 0` would mean no limit, and a negative one never runs
    $PY -m fairdp_core.cli set compute.workers=1 && { pilot "$left"; rc=$?; }
  fi
fi
el "pilot rc $rc"
tar czf $OUT/timings.tgz results/timings 2>/dev/null
el "timing"
[ "${T_TIME:-100}" = 0 ] || timeout ${T_TIME:-100} $PY benchmarks/gpu_timing.py --device ${DEV:-cuda} --out $OUT ${TIME_ARGS:-} 2>&1 | tail -25 | tee $OUT/timing.log
el "done"
