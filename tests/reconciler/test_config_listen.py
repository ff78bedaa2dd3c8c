"""`listen` and `repos` that cannot be what they must be are named, with what to write,
before anything binds: never a traceback (`--listen 127.0.0.1:99999` gave OverflowError)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from nodus_gitops.config import listen_address, load_settings
from nodus_gitops.floor.errors import ConfigError


@pytest.mark.parametrize("listen", ["127.0.0.1:99999", "nope", "[::1]:80x", "127.0.0.1:",
                                    "127.0.0.1:-1"])
def test_a_listen_that_is_no_address_is_named(listen):
    with pytest.raises(ConfigError, match="is not HOST:PORT with a port from 0 to 65535"):
        listen_address(listen)


@pytest.mark.parametrize(("listen", "expected"), [
    ("127.0.0.1:8080", ("127.0.0.1", 8080)), (":0", ("127.0.0.1", 0)),
    ("[::1]:9000", ("::1", 9000)), ("0.0.0.0:65535", ("0.0.0.0", 65535))])
def test_a_listen_address(listen, expected):
    assert listen_address(listen) == expected


def test_the_config_and_the_environment_are_named_as_the_place_to_change(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("listen: 'localhost:http'\n")
    with pytest.raises(ConfigError, match=f"{config}: listen: 'localhost:http'"):
        load_settings(str(config), environ={})
    with pytest.raises(ConfigError, match="NODUS_GITOPS_LISTEN: 'x'"):
        load_settings(None, environ={"NODUS_GITOPS_LISTEN": "x"})
    config.write_text("repos: 5\n")
    with pytest.raises(ConfigError, match="repos must be a list of repo bindings"):
        load_settings(str(config), environ={})


def test_serve_with_a_port_out_of_range_says_so_and_exits_1(tmp_path):
    done = subprocess.run([sys.executable, "-m", "nodus_gitops.cli", "serve", "--repo", ".",
                           "--listen", "127.0.0.1:99999", "--state-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "--listen: '127.0.0.1:99999' is not HOST:PORT" in done.stderr
