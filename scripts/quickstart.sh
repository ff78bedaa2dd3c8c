#!/usr/bin/env bash
# Sets up a fresh Debian machine and runs the reconciler on the embedded defaults: the
# local backend against this repository's examples-repo/, with the dashboard on
# http://127.0.0.1:8080. Extra arguments go to `nodus-gitops serve`.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v git >/dev/null || need_apt+=(git)
command -v bwrap >/dev/null || need_apt+=(bubblewrap)
# slirp4netns gives each run (network: shared) outbound access without the host's loopback.
command -v slirp4netns >/dev/null || need_apt+=(slirp4netns)
python3 -c "import venv, ensurepip" 2>/dev/null || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    bash scripts/apt-get.sh update -qq
    bash scripts/apt-get.sh install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "please install: ${need_apt[*]} (bubblewrap contains every Job and slirp4netns gives it a network of its own; without them Jobs" \
      "fail with SandboxUnavailable unless the config says sandbox: none)" >&2
  fi
fi

# Runs drop to a user of their own: no other process of the machine shares it (nobody,
# the fallback, is often shared by daemons that could then reach a running Job's files).
if [ "$(id -u)" = 0 ] && ! id -u nodus-run >/dev/null 2>&1; then
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
    nodus-run
fi

[ -d .venv ] || python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q .

exec nodus-gitops serve --repo . --path examples-repo --interval 5s "$@"
