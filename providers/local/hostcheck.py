"""What this host lacks for the local backend's sandbox, each as a cause and its fix.

The backend's start-up (`settings`) and `nodus-gitops doctor` read the same findings, so
a Job's SandboxUnavailable message and doctor's report name one cause. Each check looks
at the host as the run user will meet it; none changes the host. Fixes are listed in
order of safety: what keeps every run contained first, what gives containment up last.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from nodus_gitops.providers.local.runuser import RunUser

TUN = "/dev/net/tun"
NETWORK_NONE = ("or set network: none in the local backend's config (runs then get a "
                "loopback of their own and no outbound network)")


@dataclass(frozen=True)
class Finding:
    """One check: `problem` None when it passes; `seen` is what was found either way."""

    seen: str
    problem: str | None = None
    fix: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def bubblewrap(path: str | None) -> Finding:
    if path is None:
        return Finding("not installed", "bubblewrap (bwrap) is not installed on the "
                       "reconciler's PATH", "install bubblewrap (apt-get install bubblewrap, "
                       "dnf install bubblewrap); or set sandbox: none in the local backend's "
                       "config to run Jobs uncontained, on a machine you trust")
    return Finding(path)


def user_namespaces(proc_sys: Path = Path("/proc/sys")) -> Finding:
    """Whether an unprivileged user may create a user namespace (bubblewrap and
    slirp4netns both need one, and the runs drop to an unprivileged user first)."""
    limit = _read_int(proc_sys / "user" / "max_user_namespaces")
    if limit == 0:
        return Finding("user.max_user_namespaces = 0",
                       "user namespaces are turned off on this host (user.max_user_namespaces "
                       "is 0): bubblewrap cannot give runs namespaces of their own",
                       "sysctl -w user.max_user_namespaces=15000, kept across boots in "
                       "/etc/sysctl.d/; or set sandbox: none in the local backend's config "
                       "to run Jobs uncontained, on a machine you trust")
    if _read_int(proc_sys / "kernel" / "unprivileged_userns_clone") == 0:
        return Finding("kernel.unprivileged_userns_clone = 0",
                       "unprivileged user namespaces are turned off on this host "
                       "(kernel.unprivileged_userns_clone is 0): the run user cannot start "
                       "bubblewrap", "sysctl -w kernel.unprivileged_userns_clone=1, kept "
                       "across boots in /etc/sysctl.d/; or set sandbox: none in the local "
                       "backend's config to run Jobs uncontained, on a machine you trust")
    if _read_int(proc_sys / "kernel" / "apparmor_restrict_unprivileged_userns") == 1:
        return Finding("kernel.apparmor_restrict_unprivileged_userns = 1",
                       "AppArmor restricts unprivileged user namespaces on this host "
                       "(kernel.apparmor_restrict_unprivileged_userns is 1)",
                       "give bwrap and slirp4netns an AppArmor profile that allows userns "
                       "(as Ubuntu's bwrap-userns-restrict does); or sysctl -w "
                       "kernel.apparmor_restrict_unprivileged_userns=0")
    return Finding("allowed" if limit is None else f"allowed (up to {limit})")


def tun_device(user: RunUser, euid: int | None = None, path: str = TUN) -> Finding:
    """Whether slirp4netns, as the run user, can open the tun device. A reconciler that
    is root opens it for the run user (a node of the run user's own in slirp4netns' own
    mount namespace, `usernet.own_tun_device`), whatever the host's node allows."""
    euid = os.geteuid() if euid is None else euid
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return Finding("absent", f"{path} does not exist on this host (no tun driver, or a "
                       "container started without the device): slirp4netns needs it to give "
                       "each run a network of its own",
                       "load the tun module (modprobe tun); in a container, start it with "
                       f"--device {path}; {NETWORK_NONE}")
    except OSError as exc:
        return Finding("unreadable", f"{path} cannot be read here: {exc.strerror}",
                       f"check the device's permissions; {NETWORK_NONE}")
    seen = f"{stat.filemode(st.st_mode)} uid {st.st_uid} gid {st.st_gid}"
    if not stat.S_ISCHR(st.st_mode):
        return Finding(seen, f"{path} is not a character device here",
                       f"recreate it (mknod {path} c 10 200); {NETWORK_NONE}")
    if euid == 0 and user.switch:
        return Finding(f"{seen}; opened for the run user by the reconciler (root)")
    if _may_read_write(st, user):
        return Finding(f"{seen}; the run user (uid {user.uid}) may open it")
    return Finding(seen, f"the run user (uid {user.uid}) cannot open {path} ({seen}), and the "
                   "reconciler is not root, so it cannot open the device for it: slirp4netns "
                   "cannot give runs a network of their own",
                   f"make the device 0666 as udev does on most distributions (chmod 0666 "
                   f"{path}, kept across boots by a udev rule: KERNEL==\"tun\", "
                   f"MODE=\"0666\"); or run the reconciler as root; {NETWORK_NONE}")


def _may_read_write(st: os.stat_result, user: RunUser) -> bool:
    """By the mode bits alone, as the kernel checks an ordinary user (no capability
    counts: inside the run's user namespace the device's owner is not mapped)."""
    if st.st_uid == user.uid:
        bits = st.st_mode >> 6
    elif st.st_gid == user.gid or st.st_gid in _groups(user):
        bits = st.st_mode >> 3
    else:
        bits = st.st_mode
    return bits & 0o6 == 0o6


def _groups(user: RunUser) -> set[int]:
    """The run user's supplementary groups as a run has them: none when the reconciler
    drops to it (it clears them), its own when it is the reconciler's user."""
    return set() if user.switch else set(os.getgroups())


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
