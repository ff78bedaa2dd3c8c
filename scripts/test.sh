#!/usr/bin/env bash
# Sets up a fresh machine for the test suite and runs it: Debian packages, a virtualenv
# with the package and its test extra, PostgreSQL when it is not already listening.
set -euo pipefail
cd "$(dirname "$0")/.."

# bubblewrap contains the local backend's runs; openssl makes the tests' HTTPS Git
# server's certificate; setpriv (util-linux) starts a reconciler as an ordinary user.
need_apt=()
command -v git >/dev/null || need_apt+=(git)
command -v bwrap >/dev/null || need_apt+=(bubblewrap)
# slirp4netns gives each run (network: shared) outbound access without the host's loopback.
command -v slirp4netns >/dev/null || need_apt+=(slirp4netns)
command -v openssl >/dev/null || need_apt+=(openssl)
command -v setpriv >/dev/null || need_apt+=(util-linux)
command -v chromium >/dev/null || need_apt+=(chromium)
# zsh and fish: the completion scripts are run in each shell, not only in bash.
command -v zsh >/dev/null || need_apt+=(zsh)
command -v fish >/dev/null || need_apt+=(fish)
if [ ${#need_apt[@]} -gt 0 ]; then
  bash scripts/apt-get.sh update -qq
  bash scripts/apt-get.sh install -y -qq "${need_apt[@]}" >/dev/null
fi

# PostgreSQL 15 on 127.0.0.1:5432 (trust auth); start Debian's cluster when it is down.
if ! (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; then
  if command -v pg_ctlcluster >/dev/null; then
    pg_ctlcluster 15 main start || echo "warning: could not start PostgreSQL; its tests will skip"
  fi
fi

# The quick start's main job as a new user runs it, on this host as it is: every example
# to Succeeded, or the run stops here with what failed (it makes .venv with the package).
bash scripts/quickstart.sh --check

python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q --require-hashes -r requirements-test.lock
python -m pip install -q --no-deps -e .
python -m pip check

# A single-node Slurm cluster for tests/providers/slurm (installs slurm-wlm, slurmrestd and munge
# when missing; needs root). Without it those tests skip and say why.
tests/providers/slurm/start.sh >/dev/null || echo "warning: the Slurm test cluster did not start"

ruff check .
exec python -m pytest -q "$@"
