#!/usr/bin/env bash
# apt-get that waits for another apt-get or dpkg (unattended upgrades on a fresh machine)
# to finish, instead of failing on its lock: `bash scripts/apt-get.sh install -y git`.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

lock_free() {  # apt and dpkg hold these with fcntl locks; try one and let it go
  python3 - "$1" <<'PY' 2>/dev/null
import fcntl, sys
with open(sys.argv[1], "a") as f:
    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
PY
}

for lock in /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock; do
  [ -e "$lock" ] || continue
  waited=0
  until lock_free "$lock"; do
    [ "$waited" = 0 ] && echo "waiting for another apt-get or dpkg to finish ($lock)" >&2
    waited=$((waited + 1))
    if [ "$waited" -ge 900 ]; then
      echo "gave up after 15 minutes: $lock is still held" >&2
      exit 1
    fi
    sleep 1
  done
done
# The lock can be taken again between the wait and the call: apt-get waits for it too.
exec apt-get -o DPkg::Lock::Timeout=900 "$@"
