"""Where the ranks of one gang meet on this machine, and nobody else: what PyTorch and
NCCL use between processes of one host.

- one Landlock domain for the gang (`landlock`): the ranks reach each other's abstract
  Unix sockets and no other run's. A domain is a thread's, and what it forks inherits
  it: the ranks are started from one thread that entered a fresh scoped domain, and do
  not enter one of their own;
- one network namespace for the gang, its loopback up: TCP to MASTER_ADDR:MASTER_PORT
  and abstract sockets work between the ranks only. With `network: none` the same
  thread unshares it (a namespace is a thread's too); with `network: shared` the thread
  enters the namespace a holder keeps, with slirp4netns on it (`usernet`). The ranks'
  bubblewrap keeps the thread's (`--share-net`). Either needs CAP_SYS_ADMIN: a
  reconciler that is not root falls back to a network per rank and says so;
- one /dev/shm, the Job's `gang-shm/` directory bound into every rank (on the Job's
  own filesystem, so its disk cap counts it), emptied whenever the gang starts and when
  it ends.

Path Unix sockets need nothing: the Job's /nodus/work is every rank's.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from nodus_gitops.providers.local import child, landlock, usernet

_LIBC = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNET = 0x40000000


@dataclass
class Space:
    """What the ranks started in this space share. Its thread lives until `release()`:
    a run dies with the thread that forked it (PR_SET_PDEATHSIG is a thread's), so it
    waits until no rank it started runs any more."""

    domain: bool = False  # one Landlock domain: the ranks must not enter their own
    network: bool = False  # one network namespace of the gang's
    problems: list[str] = field(default_factory=list)  # why something could not be shared
    ended: threading.Event = field(default_factory=threading.Event)
    holder: usernet.Holder | None = None  # what keeps it, with slirp4netns (network: shared)

    def release(self) -> None:
        """Let the thread end: every rank it started has ended; the gang's slirp4netns
        and its holder end, reaped, now."""
        if self.holder is not None:
            self.holder.stop()
            self.holder = None
        self.ended.set()


def _own_network() -> None:
    """This thread into a new network namespace, its loopback up."""
    if _LIBC.unshare(_CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    child.loopback_up()


def start_in_space(start: Callable[[Space], None], *, scope: bool, own_network: bool,
                   hold: Callable[[], usernet.Holder] | None = None) -> Space:
    """Run `start` (which starts the gang's ranks) in a thread of its own that first
    entered the gang's network namespace and Landlock domain where asked and possible:
    a loopback only (`own_network`) or the one `hold` makes, with slirp4netns on it;
    what it raises is raised here. The thread then waits for `Space.release()`."""
    space = Space()
    failure: list[BaseException] = []
    started = threading.Event()

    def body() -> None:
        if hold is not None:
            try:
                # made by this thread: the holder dies with it (PR_SET_PDEATHSIG)
                space.holder = hold()
                usernet.enter(space.holder.pid)
                space.network = True
            except OSError as exc:
                if space.holder is not None:
                    space.holder.stop()
                    space.holder = None
                space.problems.append(f"no network namespace for the gang "
                                      f"({exc.strerror or exc})")
        elif own_network:
            try:
                _own_network()
                space.network = True
            except OSError as exc:
                space.problems.append(f"no network namespace for the gang ({exc.strerror})")
        if scope:
            try:
                landlock.scope_self()
                space.domain = True
            except OSError as exc:
                space.problems.append(f"no Landlock domain for the gang ({exc.strerror})")
        try:
            start(space)
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            failure.append(exc)
        finally:
            started.set()
        space.ended.wait()

    # a daemon: the supervisor exiting ends it, and its ranks with it, as it would anyway
    threading.Thread(target=body, name="gang-ranks", daemon=True).start()
    started.wait()
    if failure:
        space.release()
        raise failure[0]
    return space
