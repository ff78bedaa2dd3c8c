#!/usr/bin/env bash
# Sets up a fresh Debian machine and runs the reconciler on the embedded defaults: the
# local backend against this repository's examples-repo/, with the dashboard on
# http://127.0.0.1:8080. Extra arguments go to `nodus-gitops serve`.
#
# --check (what CI runs): the same set-up and the same `serve`, in a state directory of its
# own, until every example has finished; exits 0 only when every one Succeeded.
set -euo pipefail
cd "$(dirname "$0")/.."
check=false
if [ "${1:-}" = --check ]; then
  check=true
  shift
fi

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

# What this host can and cannot do for the local backend, before anything runs.
nodus-gitops doctor --repo . --path examples-repo \
  || echo "doctor found a problem (above): Jobs will fail with the fix it names" >&2

if ! $check; then
  exec nodus-gitops serve --repo . --path examples-repo --interval 5s "$@"
fi

# --check: serve until every example finished, then stop it and judge by what `get` says.
state=$(mktemp -d)
export NODUS_GITOPS_HOME="$state"
nodus-gitops serve --repo . --path examples-repo --interval 5s --listen 127.0.0.1:0 \
  --log-format json "$@" 2>"$state/serve.log" &
served=$!
trap 'kill "$served" 2>/dev/null; wait "$served" 2>/dev/null; rm -rf "$state"' EXIT
verdict=""
for _ in $(seq 300); do
  if ! kill -0 "$served" 2>/dev/null; then
    echo "quick start: serve ended early; its log:" >&2
    cat "$state/serve.log" >&2
    exit 1
  fi
  nodus-gitops get -o json >"$state/get.json" 2>/dev/null || true
  # one line a resource once every example has finished (nothing while any runs)
  verdict=$(python - "$state/get.json" <<'PY'
import json, sys
try:
    rows = json.load(open(sys.argv[1]))
except ValueError:
    rows = []
if len(rows) >= 4 and all(r["phase"] in ("Succeeded", "Failed") for r in rows):
    for r in rows:
        print(f"{r['kind']}/{r['name']} {r['phase']} {r['reason'] or ''} {r['message'] or ''}")
PY
)
  [ -n "$verdict" ] && break
  sleep 1
done
nodus-gitops get
if [ -z "$verdict" ]; then
  echo "quick start: the examples had not all finished after 300 s" >&2
  exit 1
fi
if grep -v " Succeeded " <<<"$verdict" >&2; then
  echo "quick start: the examples above did not succeed" >&2
  exit 1
fi
echo "quick start: every example Succeeded"
