"""Run a command on a simulated host: the machine as a user's may be, made in a mount
namespace of the command's own, so the machine's own devices and programs never change.

    python tests/support/hostsim.py [--tun 0600|0666|absent] [--no-loop] [--no-bwrap]
                                    [--user UID:GID] -- COMMAND ARGS...

- `--tun 0600`: /dev/net/tun is `crw------- root root`, as the kernel's devtmpfs makes it
  where no udev rule widens it (many VMs and minimal images); `0666` as udev makes it;
  `absent`: there is none (a container started without the device);
- `--no-loop`: /dev has no loop devices (and no /dev/loop-control);
- `--no-bwrap`: bubblewrap is not installed (its program is hidden under a file that
  cannot be executed);
- `--user`: the command runs as that ordinary user, not root.

Needs root (it mounts); exits 125 saying why when a step fails.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import stat
import sys
import tempfile

_LIBC = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNS = 0x00020000
_MS_RDONLY, _MS_NOSUID, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 2, 4096, 16384, 1 << 18
_MNT_DETACH = 2
TUN = "/dev/net/tun"
HOSTSIM = [sys.executable, "-P", os.path.abspath(__file__)]  # how tests start it (stdlib only)
TUN_RDEV = os.makedev(10, 200)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None = None, flags: int = 0,
          data: str | None = None) -> None:
    _check(_LIBC.mount(source.encode() if source else None, target.encode(),
                       fstype.encode() if fstype else None, flags,
                       data.encode() if data else None), f"mount {target}")


def _scratch() -> str:
    """A tmpfs of this namespace's own, for the nodes and files the simulation makes."""
    where = tempfile.mkdtemp(prefix="nodus-hostsim-")
    mount("tmpfs", where, "tmpfs", _MS_NOSUID, "mode=0755")
    return where


def tun(mode: str, scratch: str) -> None:
    if mode == "absent":
        mount("tmpfs", "/dev/net", "tmpfs", _MS_NOSUID, "mode=0755")  # an empty /dev/net
        return
    node = os.path.join(scratch, "tun")
    os.mknod(node, stat.S_IFCHR | int(mode, 8), TUN_RDEV)
    os.chmod(node, int(mode, 8))  # past the umask
    if not os.path.exists(TUN):
        raise OSError(f"{TUN} is absent on this machine: it cannot be simulated as {mode}")
    mount(node, TUN, flags=_MS_BIND)


def no_loop(scratch: str) -> None:
    """A /dev like the host's, without its loop devices: a tmpfs over /dev holding a bind
    of every other entry (directories such as pts and shm keep their own mounts)."""
    stash = os.path.join(scratch, "dev")
    os.mkdir(stash)
    mount("/dev", stash, flags=_MS_BIND | _MS_REC)
    mount("tmpfs", "/dev", "tmpfs", _MS_NOSUID, "mode=0755")
    for name in os.listdir(stash):
        if name.startswith("loop"):
            continue
        src, dst = os.path.join(stash, name), os.path.join("/dev", name)
        st = os.lstat(src)
        if stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(src), dst)
            continue
        if stat.S_ISDIR(st.st_mode):
            os.mkdir(dst, stat.S_IMODE(st.st_mode))
        else:
            os.close(os.open(dst, os.O_CREAT | os.O_WRONLY, 0o600))
        mount(src, dst, flags=_MS_BIND | _MS_REC)
    _check(_LIBC.umount2(stash.encode(), _MNT_DETACH), "unmount the stash of /dev")


def no_bwrap() -> None:
    for folder in os.environ.get("PATH", "/usr/bin:/bin").split(":"):
        path = os.path.join(folder or ".", "bwrap")
        if os.path.isfile(path):
            mount("/dev/null", os.path.realpath(path), flags=_MS_BIND)  # not executable


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="hostsim")
    parser.add_argument("--tun", choices=["0600", "0666", "absent"])
    parser.add_argument("--no-loop", action="store_true")
    parser.add_argument("--no-bwrap", action="store_true")
    parser.add_argument("--user", metavar="UID:GID")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("name a command after --")
    try:
        _check(_LIBC.unshare(_CLONE_NEWNS), "unshare a mount namespace")
        mount(None, "/", flags=_MS_REC | _MS_PRIVATE)
        scratch = _scratch()
        if args.no_loop:
            no_loop(scratch)
        if args.tun:  # after /dev is rebuilt: the node goes over the /dev in use
            tun(args.tun, scratch)
        if args.no_bwrap:
            no_bwrap()
        if args.user:
            uid, gid = (int(x) for x in args.user.split(":"))
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        program = shutil.which(command[0]) or command[0]
        os.execv(program, command)
    except OSError as exc:
        print(f"hostsim: {exc}", file=sys.stderr)
        return 125


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
