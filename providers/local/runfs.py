"""A Job's own filesystem: the kernel holds what it writes to maxOutputBytes.

When the reconciler runs as root and the machine has loop devices and mkfs.ext4, every
Job gets a sparse ext4 image in its run directory (`disk/nodus-fs.img`), loop-mounted
with nodev,nosuid on `disk/files/`, which holds everything the Job writes:
`outputs/`, `state/<index>/`, `work/`, `units/` and the source checkout. A burst of
files, files held open after they were unlinked, millions of empty files: each ends in
ENOSPC inside the Job's own filesystem, never on the disk of the state directory. The
image holds the cap and a small margin (`sizes`); whatever mkfs leaves beyond that is
taken by a preallocated file in the filesystem's root, which the run never sees, so
the space a Job may use is exact. The image takes on the host only what was written
into it.

Lifecycle: a Job's supervisor makes and mounts the image when the Job first starts a
run (a pre-started supervisor has made and mounted one ahead: it moves into the run
directory with one rename of `disk/`), keeps it mounted while the Job is unfinished (a
supervisor killed and recovered finds it mounted; after a reboot it mounts it again,
the journal replaying), and unmounts it when the Job finishes, after hashing the
outputs. A finished Job's outputs are read through a read-only mount made for the read
(`reading`: `nodus cp`, the path of a Pipeline's input) or kept until the Job is
deleted or expires (`readable`); the runs of a later stage mount it read-only in their
own mount namespaces (`child`), so nothing of it stays mounted on the host. Every path
that removes a run directory unmounts first; loop devices are attached with autoclear,
so the last unmount releases them.

The filesystem has an inode for every 4 KiB block; a file, directory or link counts at
least 4 KiB against the cap (`used`), as when the cap is polled, so that running out of
inodes is reported like running out of bytes.

Elsewhere (not root, no loop devices, `diskLimit: polled`) the Job's files are a plain
directory under the run directory and the cap is polled (`diskuse.Meter`: the walk, the
files the run's processes hold open after unlinking them, no file past the cap through
RLIMIT_FSIZE, what passes between two measures aside); the Job's status says which
(`status.disk`, the `DiskLimited` condition).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import shutil
import struct
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from nodus_gitops.providers.jsonfiles import exclusive_lock, read_json, write_json

DISK_DIR = "disk"  # in a run directory: the image, its record, files/ (the mount point)
FILES = "files"
IMAGE_NAME = "nodus-fs.img"  # how a loop device backed by a Job's image is recognised
RECORD_NAME = "nodus-fs.json"  # what the image holds: {imageBytes, usableBytes, capBytes}
PIN_NAME = ".nodus-reserved"  # in the filesystem's root, never bound into a run
SPARE_DIR = ".spare-fs"
MODES = ("auto", "filesystem", "polled")
MKFS_SECONDS = 60.0
MiB = 1 << 20
INODE_BYTES = 4096  # mkfs -i: an inode per block (diskuse.ENTRY_BYTES, the polled rule)

_LIBC = ctypes.CDLL(None, use_errno=True)
_LOOP_SET_FD, _LOOP_CLR_FD, _LOOP_SET_STATUS64 = 0x4C00, 0x4C01, 0x4C04
_LOOP_CONFIGURE, _LOOP_CTL_GET_FREE = 0x4C0A, 0x4C82
_LO_FLAGS_READ_ONLY, _LO_FLAGS_AUTOCLEAR = 1, 4
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND = 1, 2, 4, 32, 4096
_MNT_DETACH = 2
_MOUNT_DATA = b"noinit_itable"  # no background zeroing of inode tables: they stay holes


class RunFsError(Exception):
    """A Job's filesystem could not be made, mounted or unmounted; the message says why."""


def find_mkfs() -> str | None:
    """mkfs.ext4 by absolute path: on the reconciler's PATH, else in the sbin folders
    (an ordinary user's PATH often lacks them)."""
    found = shutil.which("mkfs.ext4")
    if found:
        return os.path.abspath(found)
    for folder in ("/usr/sbin", "/sbin"):
        if os.access(f"{folder}/mkfs.ext4", os.X_OK):
            return f"{folder}/mkfs.ext4"
    return None


# -- sizes ------------------------------------------------------------------------
def sizes(cap: int) -> tuple[int, int]:
    """(the image's size, the bytes the Job may write in it): the cap, a margin of 1/64
    (64 KiB to 1 MiB) and a large folio (`folio_bytes`), with room for ext4's own:
    inode tables (1/16: a 256-byte inode per 4 KiB block), the journal, the clusters
    ext4 keeps back (2%, at most 16 MiB) and the group bitmaps; all of it holes on the
    host until used. mkfs then leaves a little more than the usable bytes free;
    `prepare` takes the rest with a preallocated file.

    The folio: ext4 reserves space for a buffered write a large folio (2 MiB here) at a
    time, so a write can find no space with up to that much still free. With the folio
    in the margin, a write that found no space means the Job wrote more than its cap,
    which is what the supervisor reports."""
    usable = cap + max(64 << 10, min(MiB, cap >> 6)) + folio_bytes()
    journal = _journal_mib(usable) * MiB
    kept = min(usable // 49, 16 * MiB)
    size = int((usable + journal + kept + MiB) * 16 / 15 * 1.002)
    return (size + 4095) // 4096 * 4096, usable


def folio_bytes() -> int:
    """The largest folio of the page cache: a transparent huge page (2 MiB on x86-64),
    at most 32 MiB."""
    try:
        size = int(Path("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size").read_text())
    except (OSError, ValueError):
        size = 2 * MiB
    return min(max(size, 2 * MiB), 32 * MiB)


def _journal_mib(usable: int) -> int:
    return 4 if usable < (1 << 30) else 16 if usable < (16 << 30) else 64


def plan(cap: int, mode: str = "auto", euid: int | None = None) -> dict[str, Any]:
    """settings.json's `disk`: how this machine holds a Job to `cap`. `mode` is the
    config's diskLimit: auto (an own filesystem where it can work), filesystem (it must:
    ValueError naming the setting otherwise), polled."""
    if mode not in MODES:
        raise ValueError(f"diskLimit: {mode!r} (use auto, filesystem or polled)")
    if mode == "polled":
        return {"type": "polled", "problem": "diskLimit: polled in the local backend's config"}
    euid = os.geteuid() if euid is None else euid
    mkfs = find_mkfs()
    problem = None
    if euid != 0:
        problem = "the reconciler is not root, so it cannot mount a filesystem for each Job"
    elif not os.path.exists("/dev/loop-control"):
        problem = "this machine has no loop devices (/dev/loop-control)"
    elif mkfs is None:
        problem = "mkfs.ext4 (e2fsprogs) is not installed"
    if problem is not None:
        if mode == "filesystem":
            raise ValueError(f"diskLimit: filesystem, but {problem}")
        return {"type": "polled", "problem": problem}
    size, usable = sizes(cap)
    return {"type": "filesystem", "mkfs": mkfs, "imageBytes": size, "usableBytes": usable,
            "capBytes": cap, "journalMiB": _journal_mib(usable)}


def probe(root: Path, disk: dict[str, Any]) -> str | None:
    """Why a Job's filesystem cannot work under `root` (None when it can): a small image
    made, mounted and unmounted the way a Job's is."""
    work = root / f".fs-probe-{os.getpid()}"
    image, point = work / "probe.img", work / FILES
    try:
        shutil.rmtree(work, ignore_errors=True)
        point.mkdir(parents=True)
        make_image(image, sizes(1 << 20)[0], disk["mkfs"])
        mount_image(image, point)
        try:
            os.statvfs(point)
        finally:
            detach(point)
    except (OSError, RunFsError) as exc:
        return f"a loop-mounted ext4 image does not work under {root}: {exc}"
    finally:
        try:
            if not os.path.ismount(point):
                shutil.rmtree(work, ignore_errors=True)
        except OSError:
            pass
    return None


# -- images -----------------------------------------------------------------------
def make_image(image: Path, size: int, mkfs: str, journal_mib: int = 4) -> None:
    """A sparse file of `size` bytes holding a fresh ext4 (4 KiB blocks, an inode for
    each, no blocks kept for root, nothing zeroed ahead: it takes ~0.2 MiB)."""
    partial = image.with_name(image.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)
    argv = [mkfs, "-q", "-F", "-b", "4096", "-i", str(INODE_BYTES), "-I", "256", "-m", "0",
            "-J", f"size={journal_mib}", "-O", "^resize_inode",
            "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", "-L", "nodus-run",
            str(partial)]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=MKFS_SECONDS,
                              env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C"})
    except (OSError, subprocess.SubprocessError) as exc:
        partial.unlink(missing_ok=True)
        raise RunFsError(f"{mkfs} could not run: {exc}") from None
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        said = [ln for ln in done.stderr.decode(errors="replace").splitlines() if ln.strip()]
        raise RunFsError(f"{mkfs} failed: {said[-1] if said else done.returncode}")
    os.replace(partial, image)


def spare_dir(root: Path, pid: int, ticks: int | None) -> Path:
    return root / SPARE_DIR / f"{pid}-{ticks}"


def make_spare(root: Path, disk: dict[str, Any], pid: int, ticks: int | None) -> None:
    """A pre-started supervisor makes and mounts its Job's filesystem ahead of need
    (mkfs and mount are most of the cost of a Job's first start); `take_spare` moves it
    into the run directory, mounted, with one rename."""
    made = spare_dir(root, pid, ticks)
    try:
        (root / SPARE_DIR).mkdir(mode=0o700, exist_ok=True)
        (made / FILES).mkdir(mode=0o700, parents=True)
        make_image(made / IMAGE_NAME, int(disk["imageBytes"]), disk["mkfs"],
                   int(disk.get("journalMiB", 4)))
        mount_image(made / IMAGE_NAME, made / FILES)
        _complete(made, disk)
        job_dirs(made / FILES, disk.get("owner"))
    except (OSError, RunFsError):
        discard(made)  # the Job makes its own


def take_spare(root: Path, disk: dict[str, Any], pid: int, ticks: int | None,
               dest: Path) -> bool:
    made = spare_dir(root, pid, ticks)
    rec = read_json(made / RECORD_NAME)
    if rec is None or not mounted(made / FILES) or rec.get("capBytes") != disk["capBytes"] \
            or rec.get("imageBytes") != disk["imageBytes"]:
        discard(made)
        return False
    try:
        os.rename(made, dest)  # a folder holding a mount point moves with it
    except OSError:
        discard(made)
        return False
    return True


def discard(disk_dir: Path) -> None:
    """Unmount and remove a Job's filesystem folder (a spare's, a failed one)."""
    if disk_dir.exists():
        try:
            detach(disk_dir / FILES)
        except RunFsError:
            return
        shutil.rmtree(disk_dir, ignore_errors=True)


def drop_spare(root: Path, pid: int, ticks: int | None) -> None:
    discard(spare_dir(root, pid, ticks))


def clean_spares(root: Path) -> None:
    """Remove the spare filesystems of pre-started supervisors that are gone."""
    from nodus_gitops.providers.local import procs

    try:
        entries = list((root / SPARE_DIR).iterdir())
    except OSError:
        return
    for path in entries:
        pid, _, ticks = path.name.partition("-")
        try:
            alive = procs.is_same_process(int(pid), None if ticks == "None" else int(ticks))
        except ValueError:
            alive = False
        if not alive:
            discard(path) if path.is_dir() else path.unlink(missing_ok=True)


# -- loop devices and mounts ---------------------------------------------------------
def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _loop_info(flags: int, name: str) -> bytes:
    """struct loop_info64, all zero but lo_flags and lo_file_name."""
    return struct.pack("=QQQQQIIII64s64s32sQQ", 0, 0, 0, 0, 0, 0, 0, 0, flags,
                       name.encode()[:63], b"", b"", 0, 0)


def _attach(image: Path, readonly: bool) -> tuple[str, int]:
    """A free loop device backed by `image`, with autoclear: (its path, an open fd that
    holds it until the mount does)."""
    flags = _LO_FLAGS_AUTOCLEAR | (_LO_FLAGS_READ_ONLY if readonly else 0)
    backing = os.open(image, (os.O_RDONLY if readonly else os.O_RDWR) | os.O_CLOEXEC)
    try:
        ctl = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
        try:
            for _ in range(64):
                number = fcntl.ioctl(ctl, _LOOP_CTL_GET_FREE)
                dev = f"/dev/loop{number}"
                fd = os.open(dev, (os.O_RDONLY if readonly else os.O_RDWR) | os.O_CLOEXEC)
                try:
                    config = struct.pack("=II", backing, 0) + _loop_info(flags, image.name)
                    try:
                        fcntl.ioctl(fd, _LOOP_CONFIGURE, config + bytes(64))
                    except OSError as exc:
                        if exc.errno == errno.EBUSY:
                            os.close(fd)  # taken meanwhile by another process: the next one
                            continue
                        if exc.errno not in (errno.EINVAL, errno.ENOTTY):
                            raise
                        # a kernel before 5.8: no LOOP_CONFIGURE
                        try:
                            fcntl.ioctl(fd, _LOOP_SET_FD, backing)
                        except OSError as old:
                            if old.errno == errno.EBUSY:
                                os.close(fd)
                                continue
                            raise
                        fcntl.ioctl(fd, _LOOP_SET_STATUS64, _loop_info(flags, image.name))
                    return dev, fd
                except BaseException:
                    os.close(fd)
                    raise
            raise RunFsError("every free loop device was taken by another process")
        finally:
            os.close(ctl)
    finally:
        os.close(backing)


def _loops_backed_by(image: Path) -> Iterator[tuple[str, bool]]:
    """(device name, whether its image is unlinked) of every loop device `image` backs."""
    wanted = os.path.realpath(image)
    try:
        entries = os.listdir("/sys/block")
    except OSError:
        return
    for name in entries:
        if name.startswith("loop"):
            try:
                backing = Path(f"/sys/block/{name}/loop/backing_file").read_text().strip()
            except OSError:
                continue
            if backing in (wanted, f"{wanted} (deleted)"):
                yield name, backing != wanted


def loop_of(image: Path) -> str | None:
    """A loop device already backed by `image`: its filesystem may still be alive (a
    lazy unmount, a copy in another mount namespace), and a second one on the same file
    would corrupt it; mounting the same device shares that filesystem instead."""
    return next((f"/dev/{name}" for name, unlinked in _loops_backed_by(image)
                 if not unlinked), None)


def _mount(dev: str, target: Path, readonly: bool) -> None:
    flags = _MS_NODEV | _MS_NOSUID
    if _LIBC.mount(dev.encode(), str(target).encode(), b"ext4",
                   flags | (_MS_RDONLY if readonly else 0), _MOUNT_DATA) == 0:
        return
    err = ctypes.get_errno()
    if err == errno.EBUSY and readonly:
        # the device's filesystem is alive read-write: share it, read-only here
        _check(_LIBC.mount(dev.encode(), str(target).encode(), b"ext4", flags, _MOUNT_DATA),
               f"mount {dev} on {target}")
        _check(_LIBC.mount(None, str(target).encode(), None,
                           _MS_REMOUNT | _MS_BIND | _MS_RDONLY | flags, None),
               f"make {target} read-only")
        return
    raise OSError(err, f"mount {dev} on {target}: {os.strerror(err)}")


def mount_image(image: Path, target: Path, readonly: bool = False) -> None:
    """Mount `image` on `target` (nodev, nosuid), sharing a filesystem still alive on
    a loop device of the same file."""
    existing = loop_of(image)
    if existing is not None:
        try:
            _mount(existing, target, readonly)
            return
        except OSError:
            pass  # released meanwhile: a device of its own
    dev, fd = _attach(image, readonly)
    try:
        _mount(dev, target, readonly)
    finally:
        os.close(fd)  # the mount holds the device now (autoclear: or nothing does)


def mounted(point: Path) -> bool:
    try:
        return os.path.ismount(point)
    except OSError:
        return False


def detach(point: Path, wait: float = 2.0) -> None:
    """Unmount whatever is mounted on `point`; busy past `wait` seconds: detached lazily
    (it goes when its last open file closes)."""
    deadline = time.monotonic() + wait
    while mounted(point):
        if _LIBC.umount2(str(point).encode(), 0) == 0:
            continue
        err = ctypes.get_errno()
        if err == errno.EINVAL:  # not a mount point (any more)
            return
        if err == errno.EBUSY and time.monotonic() < deadline:
            time.sleep(0.02)
            continue
        if _LIBC.umount2(str(point).encode(), _MNT_DETACH) != 0:
            err = ctypes.get_errno()
            if err != errno.EINVAL:
                raise RunFsError(f"cannot unmount {point}: {os.strerror(err)}")
            return


def detach_device(dev: int) -> None:
    """Unmount every mount of the filesystem on device `dev` (an `st_dev`), wherever it
    is now: a run directory moved away (a test's cleanup renames before it removes)
    takes its mount point along."""
    wanted = f"{os.major(dev)}:{os.minor(dev)}"
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return
    for line in lines:
        fields = line.split()
        if len(fields) > 4 and fields[2] == wanted:
            detach(Path(_unescape(fields[4])))


def detach_all(root: Path) -> list[str]:
    """Unmount every Job filesystem mounted under `root` (before removing a state
    directory by hand); returns the mount points."""
    points = [p for p, _ in _our_mounts() if p == str(root) or p.startswith(f"{root}/")]
    for point in sorted(points, key=len, reverse=True):
        detach(Path(point))
    return points


def _unescape(field: str) -> str:
    """A mountinfo path: spaces, tabs, newlines and backslashes are octal escapes."""
    if "\\" not in field:
        return field
    return field.encode().decode("unicode_escape").encode("latin-1").decode(errors="replace")


def image_held(image: Path) -> bool:
    """True while a writable loop device is backed by `image`, unlinked or not: a
    finished Job's filesystem kept alive by an open file (a lazy unmount), which can
    still grow. A device attached read-only (a finished Job's outputs being read) is not."""
    for name, _unlinked in _loops_backed_by(image):
        try:
            if Path(f"/sys/block/{name}/ro").read_text().strip() == "1":
                continue
        except OSError:
            pass
        return True
    return False


def _loop_ext4_mounts() -> Iterator[tuple[str, str]]:
    """(mount point, device) of every ext4 filesystem on a loop device in this mount
    namespace."""
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return
    for line in text.splitlines():
        if " - ext4 /dev/loop" not in line:
            continue
        fields = line.split()
        try:
            source = fields[fields.index("-") + 2]
        except (ValueError, IndexError):
            continue
        yield _unescape(fields[4]), source


def _our_mounts() -> Iterator[tuple[str, str]]:
    """(mount point, device) of every mount of a Job's image in this mount namespace."""
    for point, source in _loop_ext4_mounts():
        try:
            backing = Path(f"/sys/block/{source[5:]}/loop/backing_file").read_text().strip()
        except OSError:
            continue
        if backing.removesuffix(" (deleted)").endswith(f"/{IMAGE_NAME}"):
            yield point, source


def foreign_mounts(keep: Sequence[str]) -> list[str]:
    """Job filesystems (any ext4 on a loop device: nothing a run's runtime needs) of this
    mount namespace that hold no path of `keep`: what a run's staging namespace, a copy
    of the host's that lives as long as the run, unmounts (`prune`) so that it never
    holds another Job's filesystem after the host unmounted it. Read by the parent,
    before the fork: a forked child pays dearly for Python work."""
    found = []
    for point, _ in _loop_ext4_mounts():
        if not any(k == point or k.startswith(point.rstrip("/") + "/") for k in keep):
            found.append(point)
    return found


def prune(points: Sequence[str]) -> None:
    """In a mount namespace of its own: lazily unmount `points` (`foreign_mounts`)."""
    for point in points:
        _LIBC.umount2(point.encode(), _MNT_DETACH)


# -- a Job's filesystem ---------------------------------------------------------------
def record(disk_dir: Path) -> dict[str, Any] | None:
    return read_json(disk_dir / RECORD_NAME)


def prepare(disk_dir: Path, disk: dict[str, Any], root: Path,
            spare: tuple[int, int | None] | None = None) -> str:
    """Make (or take the spare of `spare`, a pre-started supervisor's pid and ticks) and
    mount the Job's filesystem on `disk_dir/files`, read-write. Returns "spare" (taken,
    the Job's directories made), "made" or "mounted" (it existed). RunFsError says what
    failed."""
    files, image = disk_dir / FILES, disk_dir / IMAGE_NAME
    fresh = False
    with _locked(disk_dir.parent):
        if not disk_dir.exists():
            if spare is not None and take_spare(root, disk, *spare, disk_dir):
                return "spare"
            new = disk_dir.with_name(f".{DISK_DIR}-new")
            shutil.rmtree(new, ignore_errors=True)  # a supervisor killed while making it
            try:
                (new / FILES).mkdir(mode=0o700, parents=True)
                make_image(new / IMAGE_NAME, int(disk["imageBytes"]), disk["mkfs"],
                           int(disk.get("journalMiB", 4)))
                os.rename(new, disk_dir)
            except BaseException:
                shutil.rmtree(new, ignore_errors=True)
                raise
            fresh = True
        if mounted(files) and _read_only(files):
            detach(files)  # mounted to be read: never while a supervisor writes
        if not mounted(files):
            try:
                mount_image(image, files)
            except OSError as exc:
                raise RunFsError(f"cannot mount {image}: {exc.strerror or exc}") from None
        if record(disk_dir) is None:
            _complete(disk_dir, disk)
    return "made" if fresh else "mounted"


JOB_DIRS = ("outputs", "work", "units")  # the run user's (and state/<index>, made per run)


def job_dirs(files: Path, owner: Sequence[int] | None) -> None:
    """The Job's directories in `files`: outputs, work and units the run user's (`owner`,
    uid and gid, when runs switch users), 0700; state the reconciler's."""
    (files / "state").mkdir(exist_ok=True)
    for name in JOB_DIRS:
        path = files / name
        path.mkdir(exist_ok=True)
        if owner is not None:
            os.chown(path, owner[0], owner[1], follow_symlinks=False)
            path.chmod(0o700)


def _complete(disk_dir: Path, disk: dict[str, Any]) -> None:
    """A new filesystem's last steps: its root the reconciler's only, what is beyond the
    usable bytes taken, and the record of what it holds."""
    files = disk_dir / FILES
    files.chmod(0o700)
    usable = _pin(files, int(disk["usableBytes"]))
    st = os.statvfs(files)
    write_json(disk_dir / RECORD_NAME, {"imageBytes": os.stat(disk_dir / IMAGE_NAME).st_size,
                                        "usableBytes": usable,
                                        "capBytes": int(disk["capBytes"]),
                                        "inodesUsed": st.f_files - st.f_ffree})


def _pin(files: Path, usable: int) -> int:
    """Take what the filesystem has beyond `usable` with a preallocated file (unwritten
    extents: nothing is written on the host); returns the bytes left for the Job."""
    st = os.statvfs(files)
    excess = st.f_bavail * st.f_frsize - usable
    if excess > 0:
        fd = os.open(files / PIN_NAME, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.posix_fallocate(fd, os.fstat(fd).st_size, excess)
        except OSError:
            pass  # the margin is a little larger then
        finally:
            os.close(fd)
        st = os.statvfs(files)
    return st.f_bavail * st.f_frsize


def used(files: Path, usable: int, inodes: int = 0) -> int:
    """Bytes the Job's files take in its filesystem now (open unlinked files included),
    every file, directory or link at least INODE_BYTES; `inodes`: those in use when the
    filesystem was new."""
    st = os.statvfs(files)
    entries = max(0, st.f_files - st.f_ffree - inodes)
    return max(0, usable - st.f_bavail * st.f_frsize, entries * INODE_BYTES)


def growth(image: Path) -> int:
    """How much more of the host's disk `image` can take: its holes."""
    try:
        st = os.stat(image)
    except OSError:
        return 0
    return max(0, st.st_size - st.st_blocks * 512)


def _locked(run_path: Path) -> AbstractContextManager[None]:
    return exclusive_lock(run_path / "nodus-fs.lock", mode=0o600)


def _finished(run_path: Path) -> bool:
    from nodus_gitops.floor.phases import is_terminal

    return is_terminal((read_json(run_path / "status.json") or {}).get("phase"))


def _read_only(point: Path) -> bool:
    try:
        return bool(os.statvfs(point).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _settled(disk_dir: Path, wait: float = 5.0) -> bool:
    """True when `disk_dir` holds a finished Job's image whose read-write mount, if its
    supervisor still has one, is gone (it unmounts right after the last status)."""
    files = disk_dir / FILES
    if not (disk_dir / IMAGE_NAME).exists() or not _finished(disk_dir.parent):
        return False  # nothing to mount, or the supervisor's to mount
    deadline = time.monotonic() + wait
    while mounted(files) and not _read_only(files) and time.monotonic() < deadline:
        time.sleep(0.01)
    return True


def readable(disk_dir: Path) -> str | None:
    """Mount a finished Job's filesystem read-only on `files` when it is not mounted
    (it was unmounted when the Job finished, or the machine restarted); kept until the
    Job is deleted or expires. Returns why it cannot be read (None: readable, or no
    image: a Job whose files were never its own filesystem)."""
    if not _settled(disk_dir):
        return None
    files, image = disk_dir / FILES, disk_dir / IMAGE_NAME
    try:
        with _locked(disk_dir.parent):
            if not mounted(files):
                mount_image(image, files, readonly=True)
    except (OSError, RunFsError) as exc:
        return f"cannot mount the Job's filesystem {image} to read it: {exc}"
    return None


@contextmanager
def reading(disk_dir: Path) -> Iterator[str | None]:
    """`readable` for the length of a read: a mount made here is undone at the end."""
    if not _settled(disk_dir):
        yield None
        return
    files, image = disk_dir / FILES, disk_dir / IMAGE_NAME
    with _locked(disk_dir.parent):
        made = False
        problem = None
        if not mounted(files):
            try:
                mount_image(image, files, readonly=True)
                made = True
            except (OSError, RunFsError) as exc:
                problem = f"cannot mount the Job's filesystem {image} to read it: {exc}"
        try:
            yield problem
        finally:
            if made:
                detach(files)


def disk_of(path: str | Path, root: Path) -> Path | None:
    """The Job filesystem folder holding `path` (a Pipeline stage's input), if any."""
    try:
        parts = Path(os.path.abspath(path)).relative_to(root).parts
    except ValueError:
        return None
    if len(parts) >= 4 and parts[2:4] == (DISK_DIR, FILES):
        return root / parts[0] / parts[1] / DISK_DIR
    return None


def describe(disk: dict[str, Any]) -> str:
    """The DiskLimited condition's message."""
    if disk["type"] == "filesystem":
        return (f"the Job's files (/nodus/outputs, /nodus/work, /nodus/state, the source "
                f"checkout) are an ext4 filesystem of their own: the kernel refuses writes "
                f"past maxOutputBytes ({disk['capBytes']})")
    return (f"the Job's files are measured every few seconds (at once while the disk fills "
            f"faster than the Job's room) against maxOutputBytes, with the files its "
            f"processes hold open after deleting them, and no single file may pass it "
            f"(RLIMIT_FSIZE); several files can pass it between two measures, as the kernel "
            f"does not hold the Job to it: {disk.get('problem') or 'no filesystem of its own'}")

