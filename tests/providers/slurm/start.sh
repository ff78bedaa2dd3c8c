#!/usr/bin/env bash
# Starts a single-node Slurm cluster for the slurm backend's tests: munged, slurmctld,
# slurmd and slurmrestd (JWT, as a non-root user) on 127.0.0.1, two fake GPU types (L4 and
# A10), its config and state under one directory. Idempotent: a running cluster is reused.
# Prints the environment lines the tests and the provider read (SLURM_URL, SLURM_USER,
# SLURM_JWT, SLURM_CONF, NODUS_SLURM_ROOT, NODUS_SLURM_TOKEN_FILE).
#
# Env: NODUS_SLURM_STATE  state directory (default /tmp/nodus-slurm)
#      NODUS_SLURM_PORT   slurmrestd port (default 6820)
#      NODUS_SLURM_USER   the user jobs run as and the token is for (default root)
#      NODUS_SLURM_CPUS   CPUs the node advertises (default 32: the scheduler, not the
#                         2 real cores, should decide how many trivial jobs run at once)
#      NODUS_SLURM_CGROUP 1 = cgroup v1 memory limits (OUT_OF_MEMORY state); default 0
# Exit status: 0 up, 2 not root, 3 Slurm cannot be installed, 4 a daemon did not start.
set -euo pipefail
STATE=${NODUS_SLURM_STATE:-/tmp/nodus-slurm}
PORT=${NODUS_SLURM_PORT:-6820}
JOBUSER=${NODUS_SLURM_USER:-root}
CPUS=${NODUS_SLURM_CPUS:-32}
ETC=$STATE/etc RUN=$STATE/run LOG=$STATE/log
export SLURM_CONF=$ETC/slurm.conf
URL=http://127.0.0.1:$PORT
unset SLURM_JWT  # the daemons and this script authenticate with munge
HERE=$(cd "$(dirname "$0")" && pwd)
# The daemons keep this script's working directory: one that is deleted later (a test
# checkout) makes slurmrestd die on its next job submission, so they start from /.
cd /

say() { echo "start.sh: $*" >&2; }
print_env() {
  echo "SLURM_URL=$URL"
  echo "SLURM_USER=$JOBUSER"
  echo "SLURM_JWT=$(cat "$STATE/token")"
  echo "SLURM_CONF=$SLURM_CONF"
  echo "NODUS_SLURM_ROOT=$STATE/shared"
  echo "NODUS_SLURM_TOKEN_FILE=$STATE/token"
}
alive() { [ -s "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null; }
http_code() { curl -s -o /dev/null -w '%{http_code}' "$@" 2>/dev/null || true; }
token_ok() {
  [ -s "$STATE/token" ] && [ "$(http_code -H "X-SLURM-USER-NAME: $JOBUSER" \
    -H "X-SLURM-USER-TOKEN: $(cat "$STATE/token")" "$URL/slurm/v0.0.38/ping")" = 200 ]
}

[ "$(id -u)" = 0 ] || { say "must run as root (slurmd and munged need it)"; exit 2; }

# 1. Packages (Debian 12: Slurm 22.05).
if ! command -v slurmctld >/dev/null || ! command -v slurmrestd >/dev/null \
   || ! command -v munged >/dev/null || ! command -v sbatch >/dev/null \
   || ! command -v curl >/dev/null; then
  say "installing slurm-wlm slurmrestd munge"
  export DEBIAN_FRONTEND=noninteractive
  if ! { apt-get update -qq && apt-get install -y -qq slurm-wlm slurm-client slurmrestd \
         munge curl >/dev/null; }; then
    say "apt-get could not install Slurm"; exit 3
  fi
fi

# 2. Reuse a running cluster (same state dir, all daemons alive, token accepted); when
#    only slurmrestd is gone, start just that (the jobs slurmctld holds are kept).
if alive slurmctld && alive slurmd && alive slurmrestd && token_ok; then
  print_env; exit 0
fi
FULL=1
if alive slurmctld && alive slurmd; then
  FULL=0
else
  "$HERE/stop.sh" >/dev/null 2>&1 || true
fi

mkdir -p "$ETC" "$RUN" "$LOG" "$STATE/ctld" "$STATE/spool" "$STATE/dev" "$STATE/shared"
chown slurm:slurm "$STATE/ctld" "$LOG"
chmod 755 "$STATE" "$STATE/shared"
getent passwd "$JOBUSER" >/dev/null || useradd -m -s /bin/bash "$JOBUSER"
chown "$JOBUSER" "$STATE/shared"

# 3. munge: Debian's postinst makes the key; start munged unless one already answers.
if [ ! -s /etc/munge/munge.key ]; then
  mungekey -c -k /etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
fi
if ! munge -n </dev/null >/dev/null 2>&1; then
  mkdir -p /run/munge && chown munge:munge /run/munge && chmod 755 /run/munge
  runuser -u munge -- /usr/sbin/munged
  touch "$RUN/munged.ours"  # stop.sh stops only a munged this script started
fi

# 4. JWT key (read by slurmctld as SlurmUser) and fake GPUs: character devices 1:3
#    (/dev/null); File= is what makes Slurm set CUDA_VISIBLE_DEVICES.
if [ ! -s "$ETC/jwt.key" ]; then
  dd if=/dev/urandom bs=32 count=1 of="$ETC/jwt.key" status=none
fi
chown slurm:slurm "$ETC/jwt.key" && chmod 600 "$ETC/jwt.key"
for i in 0 1 2 3 4 5 6 7; do
  [ -c "$STATE/dev/gpu$i" ] || { rm -f "$STATE/dev/gpu$i"; mknod -m 666 "$STATE/dev/gpu$i" c 1 3; }
done

write_config() {
MEM=65536  # advertised MiB; SlurmdParameters=config_overrides lets the node claim it
if [ "${NODUS_SLURM_CGROUP:-0}" = 1 ] && [ -w /sys/fs/cgroup/memory ]; then
  TRACK="ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup"
  printf 'CgroupPlugin=cgroup/v1\nCgroupAutomount=no\nConstrainRAMSpace=yes\n' >"$ETC/cgroup.conf"
else
  TRACK="ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherParams=OverMemoryKill"
  rm -f "$ETC/cgroup.conf"
fi

cat >"$ETC/slurm.conf" <<EOF
ClusterName=nodus-ci
SlurmctldHost=localhost
SlurmctldAddr=127.0.0.1
SlurmUser=slurm
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$ETC/jwt.key
CredType=cred/munge
MpiDefault=none
MailProg=/bin/true
$TRACK
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG/jobcomp.log
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,default_queue_depth=200
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
GresTypes=gpu
ReturnToService=2
SlurmdParameters=config_overrides
CommunicationParameters=NoInAddrAny
MinJobAge=900
MaxJobCount=100000
MaxArraySize=10001
KillWait=3
InactiveLimit=0
SlurmctldPort=$((PORT - 3))
SlurmdPort=$((PORT - 2))
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM Gres=gpu:L4:4,gpu:A10:4 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=eu Nodes=ALL MaxTime=INFINITE State=UP
EOF
cat >"$ETC/gres.conf" <<EOF
AutoDetect=off
NodeName=localhost Name=gpu Type=L4  File=$STATE/dev/gpu[0-3]
NodeName=localhost Name=gpu Type=A10 File=$STATE/dev/gpu[4-7]
EOF
}

# 5. slurmctld (clean state: -c) and slurmd; wait for the node to be idle.
start_controller() {
/usr/sbin/slurmctld -c -f "$SLURM_CONF"
/usr/sbin/slurmd -f "$SLURM_CONF" -N localhost
st=
for _ in $(seq 1 200); do
  st=$(sinfo -h -N -n localhost -o %t 2>/dev/null | sort -u || true)
  [ "$st" = idle ] && break
  sleep 0.1
done
[ "$st" = idle ] || { say "node not idle (state '${st:-?}'); see $LOG"; exit 4; }
}
if [ "$FULL" = 1 ]; then write_config; start_controller; fi

# 6. slurmrestd refuses root: it drops to a system user after binding. SLURM_JWT=daemon
#    loads auth/jwt; only openapi/v0.0.3x (the database plugins abort without slurmdbd).
getent passwd slurmrest >/dev/null || useradd -r -M -s /usr/sbin/nologin slurmrest
alive slurmrestd && stop_rest=$(cat "$RUN/slurmrestd.pid") && kill "$stop_rest" && sleep 0.2
SLURM_JWT=daemon setsid /usr/sbin/slurmrestd -f "$SLURM_CONF" -u slurmrest -g slurmrest \
  -a rest_auth/jwt -s openapi/v0.0.36,openapi/v0.0.37,openapi/v0.0.38 "127.0.0.1:$PORT" \
  >"$LOG/slurmrestd.log" 2>&1 </dev/null &
echo $! >"$RUN/slurmrestd.pid"
code=
for _ in $(seq 1 100); do
  code=$(http_code "$URL/slurm/v0.0.38/ping")
  [ "$code" = 401 ] && break  # 401 without a token: it is up
  sleep 0.1
done
[ "$code" = 401 ] || { say "slurmrestd did not answer (HTTP '$code'); see $LOG"; exit 4; }

# 7. A token for the job user, then a probe job that must run to the end.
if ! token_ok; then
  scontrol token username="$JOBUSER" lifespan=604800 | cut -d= -f2 >"$STATE/token.new"
  chmod 600 "$STATE/token.new" && mv "$STATE/token.new" "$STATE/token"
fi
token_ok || { say "slurmrestd refuses the fresh token"; exit 4; }
probe=$(sbatch --parsable -J nodus-probe -o /dev/null --wrap true)
for _ in $(seq 1 200); do
  [ -z "$(squeue -h -j "$probe" -t all -o %T 2>/dev/null | grep -v COMPLETED)" ] && break
  sleep 0.1
done
squeue -h -j "$probe" -t all -o %T | grep -q COMPLETED || { say "probe job did not run"; exit 4; }
print_env
