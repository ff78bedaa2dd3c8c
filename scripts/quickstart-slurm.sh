#!/usr/bin/env bash
# The quick start on Slurm: starts a single-node test cluster (tests/providers/slurm/start.sh: needs
# root, installs slurm-wlm, slurmrestd and munge when missing), then points the same
# examples-repo/ at it. `scripts/quickstart-slurm.sh` serves (dashboard on :8080);
# `scripts/quickstart-slurm.sh reconcile` applies once and waits until all finished.
set -euo pipefail
cd "$(dirname "$0")/.."

[ -d .venv ] || python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q .

while IFS='=' read -r key value; do export "$key=$value"; done < <(tests/providers/slurm/start.sh)

state=${NODUS_GITOPS_HOME:-.nodus-gitops-slurm}
mkdir -p "$state"
cat > "$state/config.yaml" <<CONFIG
stateDir: $state
repos:
  - id: examples-slurm
    url: $(pwd)
    branch: $(git rev-parse --abbrev-ref HEAD)
    path: examples-repo
    provider: slurm
    interval: 5s
providers:
  slurm:
    type: slurm
    url: $SLURM_URL
    user: $SLURM_USER
    tokenFile: $NODUS_SLURM_TOKEN_FILE
    root: $NODUS_SLURM_ROOT
    slurmConf: $SLURM_CONF
    partitions: {us: debug, eu: eu}
CONFIG

if [ "${1:-serve}" = reconcile ]; then
  exec nodus-gitops reconcile --config "$state/config.yaml" --timeout 600
fi
exec nodus-gitops serve --config "$state/config.yaml" "$@"
