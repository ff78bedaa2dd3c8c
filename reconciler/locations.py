"""Where the command line finds its config file and its state, as kubectl finds its
kubeconfig: a flag, then an environment variable, then a default.

- the config file: `--config FILE`, else `NODUS_GITOPS_CONFIG`, else the user's
  `$XDG_CONFIG_HOME/nodus-gitops/config.yaml` (`~/.config/...`) where there is one;
- the state directory: `--state-dir DIR`, else `NODUS_GITOPS_HOME`, else the config's
  `stateDir`, else `./.nodus-gitops` (a state URL, `--state` or `NODUS_GITOPS_STATE`,
  names a database instead).

A read command that finds no state says each place it looked, in order, and stops at
the first that named a directory: that one is where the state should have been.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

CONFIG_ENV = "NODUS_GITOPS_CONFIG"
HOME_ENV = "NODUS_GITOPS_HOME"
DEFAULT_STATE_DIR = ".nodus-gitops"  # config.DEFAULT_STATE_DIR (a test keeps them equal)
STATE_FILE = "state.db"  # state.engine.STATE_FILE, named here without loading SQLAlchemy


@dataclass(frozen=True)
class ConfigFile:
    """The config file a command reads (`path`, None for none) and what named it:
    `--config`, `NODUS_GITOPS_CONFIG`, or `user` for the one found in the user's folder."""

    path: str | None
    named_by: str | None

    @property
    def ambient(self) -> bool:
        """Found by default rather than named: its repos do not join a `--repo`."""
        return self.named_by == "user"


def user_config(environ: Mapping[str, str]) -> Path:
    """`$XDG_CONFIG_HOME/nodus-gitops/config.yaml`, `~/.config/...` without it."""
    base = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME") or "~").expanduser()
                                                 / ".config")
    return Path(base) / "nodus-gitops" / "config.yaml"


def find_config(flag: str | None, environ: Mapping[str, str]) -> ConfigFile:
    """The config file: the flag's, else the environment's (which must exist, as the
    flag's must: config.load_settings says so), else the user's if it exists."""
    if flag:
        return ConfigFile(flag, "--config")
    if environ.get(CONFIG_ENV):
        return ConfigFile(environ[CONFIG_ENV], CONFIG_ENV)
    found = user_config(environ)
    return ConfigFile(str(found), "user") if found.is_file() else ConfigFile(None, None)


def no_state(flag: str | None, environ: Mapping[str, str], config: ConfigFile,
             state_dir: Path) -> str:
    """What a read command says when `state_dir` (where the settings put the state) has
    no database: each place looked at, in order, up to the one that named it, and how
    to point the command elsewhere."""
    there = ": no state.db there"
    looked = [f"--state-dir {flag}{there}" if flag else "--state-dir: not given"]
    if not flag:
        home = environ.get(HOME_ENV)
        looked.append(f"{HOME_ENV}={home}{there}" if home else f"{HOME_ENV}: not set")
        if not home:
            looked.append(_config_place(config, state_dir, there, environ))
            if not looked[-1].endswith(there):
                looked.append(f"./{DEFAULT_STATE_DIR}{there} ({Path.cwd() / DEFAULT_STATE_DIR})")
    places = "\n".join(f"  {n}. {place}" for n, place in enumerate(looked, 1))
    return (f"no state database at {(state_dir / STATE_FILE).absolute()}; looked, in order, "
            f"at:\n{places}\npoint elsewhere with --state-dir DIR, {HOME_ENV}=DIR, a config's "
            f"stateDir (--config FILE or {CONFIG_ENV}) or --state URL; or make the state "
            "first with `nodus-gitops reconcile` (or `serve`)")


def _config_place(config: ConfigFile, state_dir: Path, there: str,
                  environ: Mapping[str, str]) -> str:
    if config.path is None:
        return (f"stateDir of a config: no config (no --config, no {CONFIG_ENV}, no "
                f"{user_config(environ)})")
    named = "found there" if config.ambient else config.named_by
    if state_dir == Path(DEFAULT_STATE_DIR):
        return f"stateDir in {config.path} ({named}): not set"
    return f"stateDir {state_dir} in {config.path} ({named}){there}"
