"""The host's causes, each read as the kernel would apply it to the run user."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from nodus_gitops.providers.local import hostcheck
from nodus_gitops.providers.local.runuser import RunUser

DROPPED = RunUser(65534, 65534, True, "nobody")  # a root reconciler drops to it
OWN = RunUser(65534, 65534, False, "the reconciler's own user")  # a reconciler as nobody


def tun_node(tmp_path: Path, mode: int, uid: int = 0, gid: int = 0) -> str:
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    node = tmp_path / "tun"
    os.mknod(node, stat.S_IFCHR | mode, os.makedev(10, 200))
    node.chmod(mode)
    os.chown(node, uid, gid)
    return str(node)


def test_a_root_reconciler_opens_a_closed_device_for_the_run_user(tmp_path):
    found = hostcheck.tun_device(DROPPED, euid=0, path=tun_node(tmp_path, 0o600))
    assert found.ok and found.seen.startswith("crw------- uid 0 gid 0; opened for the run user")


@pytest.mark.parametrize(("mode", "uid", "gid", "ok"), [
    (0o600, 0, 0, False), (0o660, 0, 0, False), (0o606, 0, 0, True), (0o666, 0, 0, True),
    (0o600, 65534, 0, True), (0o060, 0, 65534, True), (0o604, 0, 0, False),
])
def test_a_reconciler_that_is_not_root_is_held_to_the_mode_bits(tmp_path, mode, uid, gid, ok):
    found = hostcheck.tun_device(OWN, euid=65534, path=tun_node(tmp_path, mode, uid, gid))
    assert found.ok is ok, found
    if not ok:
        assert found.problem.startswith(f"the run user (uid 65534) cannot open {tmp_path}/tun")
        assert found.fix.startswith("make the device 0666 as udev does")
        assert "network: host" not in found.fix


def test_no_device_says_how_to_get_one(tmp_path):
    found = hostcheck.tun_device(DROPPED, euid=0, path=str(tmp_path / "tun"))
    assert not found.ok and "does not exist" in found.problem
    assert "modprobe tun" in found.fix and "--device" in found.fix


def test_a_file_that_is_not_a_device_is_named(tmp_path):
    (tmp_path / "tun").write_text("")
    found = hostcheck.tun_device(DROPPED, euid=0, path=str(tmp_path / "tun"))
    assert not found.ok and "is not a character device" in found.problem


def sysctls(tmp_path: Path, **values: int) -> Path:
    for name, value in values.items():
        section, key = name.split("__")
        (tmp_path / section).mkdir(exist_ok=True)
        (tmp_path / section / key).write_text(f"{value}\n")
    return tmp_path


@pytest.mark.parametrize(("values", "cause"), [
    ({"user__max_user_namespaces": 0}, "user.max_user_namespaces is 0"),
    ({"user__max_user_namespaces": 100, "kernel__unprivileged_userns_clone": 0},
     "kernel.unprivileged_userns_clone is 0"),
    ({"kernel__apparmor_restrict_unprivileged_userns": 1},
     "apparmor_restrict_unprivileged_userns is 1"),
])
def test_user_namespaces_turned_off_are_named_with_the_setting(tmp_path, values, cause):
    found = hostcheck.user_namespaces(sysctls(tmp_path, **values))
    assert not found.ok and cause in found.problem and "sysctl" in found.fix


def test_user_namespaces_allowed(tmp_path):
    assert hostcheck.user_namespaces(sysctls(tmp_path, user__max_user_namespaces=63)).ok
    assert hostcheck.user_namespaces(tmp_path / "nothing").ok  # a kernel without the knobs


def test_bubblewrap_missing():
    assert hostcheck.bubblewrap("/usr/bin/bwrap").ok
    found = hostcheck.bubblewrap(None)
    assert not found.ok and found.fix.startswith("install bubblewrap")
