#!/usr/bin/env bash
# Stops the test cluster start.sh started: slurmrestd, slurmd, slurmctld (by the PIDs in
# its state directory), and munged only when start.sh started it. Keeps the state dir.
STATE=${NODUS_SLURM_STATE:-/tmp/nodus-slurm}
RUN=$STATE/run
stop_pid() {
  local pid=$1
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}
for d in slurmrestd slurmd slurmctld; do
  if [ -s "$RUN/$d.pid" ]; then
    stop_pid "$(cat "$RUN/$d.pid")"
    rm -f "$RUN/$d.pid"
  fi
done
if [ -e "$RUN/munged.ours" ] && [ -s /run/munge/munged.pid ]; then
  stop_pid "$(cat /run/munge/munged.pid)"
  rm -f "$RUN/munged.ours"
fi
if [ -d /sys/fs/cgroup/memory/slurm_localhost ]; then
  find /sys/fs/cgroup/*/slurm_localhost -depth -type d -exec rmdir {} \; 2>/dev/null
fi
true
