"""A distributed Job (spec.distributed) on this machine: a gang of runs, one per node.

The ranks stand where a Job's indexes stand in its run directory (rank r's log is
`logs/<r>-<attempt>.log`, its checkpoint `state/<r>`), but the gang is the Job's one
index: it starts only once every rank has its GPU slots, all ranks start in the same
pass, one rank failing stops the others (each gets its grace period) and the whole
gang starts again, fresh, while backoffLimit allows; the Job succeeds when every rank
has succeeded. Rank 0's outputs are the Job's own; rank r's are stored under `rank-<r>/`.
The ranks share one /dev/shm, one Landlock domain and one network namespace (`gangspace`;
with `network: shared` one slirp4netns for the gang), as processes of one host do under
torchrun.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from nodus_gitops.floor.phases import Phase, Reason, is_terminal
from nodus_gitops.providers.local import gangspace, jobstate, landlock, launch, usernet
from nodus_gitops.providers.local.outputs import merge
from nodus_gitops.providers.local.spec import OUTPUTS_MOUNT, Output

if TYPE_CHECKING:
    from nodus_gitops.providers.local.driver import JobDriver
    from nodus_gitops.providers.local.runs import Exit, Lease, Run

TEARDOWN = "gang"  # why a rank was asked to stop: a peer failed


def free_port() -> int:
    """A port nothing listens on now, for rank 0 to rendezvous on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_output_dir(rank: int) -> str:
    """Where a rank's outputs are stored, below the Job's outputs ("" for rank 0)."""
    return "" if rank == 0 else f"rank-{rank}"


def ranked_outputs(declared: tuple[Output, ...], nodes: int) -> tuple[Output, ...]:
    """The outputs of every rank but 0, as `status.outputs` records and `cp` names them
    (`rank-<r>/<name>`, stored under `rank-<r>/`): distributed outputs identify their rank."""
    return tuple(Output(f"{rank_output_dir(r)}/{out.name}",
                        f"{OUTPUTS_MOUNT}/{rank_output_dir(r)}/{out.relative}".rstrip("/"))
                 for r in range(1, nodes) for out in declared)


class Gang:
    def __init__(self, driver: JobDriver):
        self.d = driver
        self.nodes = driver.spec.members
        self.ranks = list(range(self.nodes))
        self.attempts: dict[int, int] = {}  # the attempt each succeeded rank ran
        self.fresh = False  # the next start follows a failure: no rank keeps its state
        self.teardown_deadline: float | None = None
        self.space: gangspace.Space | None = None  # what the running ranks share
        # the gang is one index: it is complete, or every rank runs (again)
        done = 0 in driver.st["completedIndexes"]
        driver.completed = set(self.ranks) if done else set()
        driver.pending = [] if done else list(self.ranks)

    # -- what the driver shows ----------------------------------------------------
    def completed_indexes(self) -> list[int]:
        return [0] if self.complete else []

    @property
    def complete(self) -> bool:
        return self.d.completed == set(self.ranks)

    def wanted(self) -> str:
        req = self.d.spec.gpu
        return f"{self.nodes} ranks of {req.describe() if req else 'CPU only'}"

    # -- starting ---------------------------------------------------------------------
    def schedule(self, now: float) -> None:
        d = self.d
        if d.active:
            self._tear_down(now)
            return
        self.release_space()
        if not d.pending:
            return
        self._restart_whole()
        if not d._disk_allows(now):
            return
        leases = self._acquire(now)
        if leases is None:
            return
        if (not d.attached and not d.attach(now)) or (d.place is None and not d.prepare(now)):
            for lease in leases:
                if lease:
                    lease.release()
            return
        port = free_port()
        d.pending = []
        self.empty_shm()
        d.run.make_gang_shm(d.sandbox.user)
        box = d.place.sandbox if d.place is not None else None
        contained = box is not None and box.contained

        def start_ranks(space: gangspace.Space) -> None:
            for rank in self.ranks:
                d.spawn(rank, leases[rank], now, count_attempt=rank == 0, space=space,
                        gang=launch.gang_environment(rank, self.nodes, port))

        own = contained and box.network != "host"  # type: ignore[union-attr]
        hold = None
        if own and box.user_net:  # type: ignore[union-attr]
            def hold() -> usernet.Holder:
                return usernet.hold_network(box.slirp, box.user)  # type: ignore

        space = self.space = gangspace.start_in_space(
            start_ranks, scope=contained and landlock.scoping() is None,
            own_network=own, hold=hold)
        attempt = d.st["indexAttempts"].get("0", 1)
        d.event("GangStarted", f"{self.nodes} ranks started together (attempt {attempt}), "
                f"rendezvous at 127.0.0.1:{port}"
                + ((", in a network namespace of the gang's own, outbound through "
                    f"slirp4netns (pid {space.holder.slirp.pid})")  # type: ignore[union-attr]
                   if space.holder else ", on a loopback of the gang's own"
                   if space.network else ""))
        if own and not space.network:
            d.event("GangIsolated", f"the local backend's network is {box.network} and "  # type: ignore[union-attr]
                    + "; ".join(space.problems) + ": each rank has a network namespace of its "
                    "own and cannot reach MASTER_ADDR of rank 0", warning=True)
        elif space.problems:
            d.event("GangNotShared", "; ".join(space.problems) + ": each rank is a Landlock "
                    "domain of its own and cannot reach another rank's abstract Unix sockets",
                    warning=True)

    def release_space(self) -> None:
        """No rank runs any more: the thread that started them may end."""
        if self.space is not None:
            self.space.release()
            self.space = None

    def empty_shm(self) -> None:
        """What the ranks left in their /dev/shm: gone when the gang starts and ends."""
        try:
            entries = list(os.scandir(self.d.run.gang_shm))
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                jobstate.remove_tree(Path(entry.path))
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)

    def _restart_whole(self) -> None:
        """Nothing runs and the gang is not complete: every rank starts (again). Ranks
        that had finished lose what they wrote; after a failure no rank keeps its state."""
        d = self.d
        for rank in sorted(d.completed):
            d._drop_run_outputs(rank)
        d.completed.clear()
        d.pending = list(self.ranks)
        if self.fresh:
            d._clear_state(self.ranks)
            self.fresh = False

    def _acquire(self, now: float) -> list[Lease | None] | None:
        """A GPU lease for every rank, or none at all (the Job waits, or fails when this
        machine could never hold the gang)."""
        d = self.d
        if not d.spec.gpu:
            return [None] * self.nodes
        matching = [s for s in d.slots if d.gpus.matches(s, d.spec.gpu)]
        needed = self.nodes * d.spec.gpu.count
        if len(matching) < needed:
            d._finish(Phase.FAILED, now, Reason.CAPACITY_UNAVAILABLE,
                      f"the gang needs {needed} GPU slots ({self.wanted()}); this machine "
                      f"has {len(matching)} that fit")
            d.st["fix"] = ("lower spec.distributed.nodes or gpusPerNode, or run the Job on "
                           "a backend with more GPUs")
            return None
        leases: list[Lease | None] = []
        for _ in self.ranks:
            lease = d.gpus.try_acquire(Path(d.settings["locksDir"]), d.slots, d.spec.gpu)
            if lease is None:
                for held in leases:
                    held.release()  # type: ignore[union-attr]
                self._wait(now)
                return None
            leases.append(lease)
        return leases

    def _wait(self, now: float) -> None:
        d = self.d
        if d.phase != Phase.QUEUED:
            d.st.update(phase=Phase.QUEUED.value, queuedSince=now)
            d.dirty = True
        if not d.gpu_wait_noted:
            d.gpu_wait_noted = True
            d.event("WaitingForCapacity", f"waiting for {self.wanted()} at once")

    # -- ending -----------------------------------------------------------------------
    def reaped(self, run: Run, ex: Exit, now: float) -> bool:
        """A rank's run ended; True when the gang took care of it (a rank stopped for a
        failed peer, or one that succeeded), False for the driver's own handling (a stop
        it asked for, or a failure)."""
        d = self.d
        if run.stopping == TEARDOWN:
            d._drop_run_outputs(run.index)
            bisect.insort(d.pending, run.index)
            return True
        if run.stopping or not ex.ok:
            return False
        d.completed.add(run.index)
        self.attempts[run.index] = run.attempt
        if self.complete:
            for rank in self.ranks:
                dest = d.run.outputs / rank_output_dir(rank)
                dest.mkdir(exist_ok=True)
                merge(d.run.run_outputs_for(rank, self.attempts[rank]), dest)
            d.st["succeeded"] += 1
        return True

    def failed(self, run: Run, now: float) -> None:
        """After the driver counted a rank's failure: unless the Job itself now stops,
        the other ranks stop too and the gang starts again, fresh."""
        d = self.d
        self.fresh = True
        if d.stop is not None or is_terminal(d.phase):
            return  # the Job fails: its stop ends the other ranks
        peers = sorted(d.active)
        for peer in peers:
            d.active[peer].terminate(TEARDOWN, now)
        self.teardown_deadline = now + d.grace
        d.event("GangFailed", f"rank {run.index} (attempt {run.attempt}) failed: "
                + (f"stopping ranks {', '.join(map(str, peers))}; " if peers else "")
                + "the gang starts again", warning=True)

    def _tear_down(self, now: float) -> None:
        """Ranks asked to stop for a failed peer get the SIGTERM once their command
        exists, and SIGKILL at the end of the grace period."""
        for run in self.d.active.values():
            if run.stopping != TEARDOWN:
                continue
            if self.teardown_deadline is not None and now >= self.teardown_deadline:
                if not run.killed:
                    run.kill()
            else:
                run.pass_on_term()

    def succeeded_message(self) -> str:
        return f"the gang of {self.nodes} ranks succeeded"
