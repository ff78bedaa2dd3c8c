"""Shell completion for bash, zsh and fish.

Each shell's script (`nodus-gitops completion SHELL`) asks the command itself what may
come next: `nodus-gitops __complete WORD... CURRENT` gets the words typed after the
program name and the word being completed (empty at a fresh one), and prints one
candidate a line, or the single line `:files` where a file name goes. The candidates
come from the same parser that parses the command line (commands, flags and their
choices) and, for a `KIND/NAME` argument, from the state, opened read-only: the names
`get KIND` would list. No state, or one that cannot be read, gives no names.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

FILES = ":files"  # the line that tells the script to complete file names
SHELLS = ("bash", "zsh", "fish")
# Options whose value is a file or a folder; other values have no candidates.
_PATH_OPTIONS = {"--state-dir", "--config", "--repo", "--path"}
_KINDS = ("job", "pipeline", "sweep")


# The names of the state's resources of a kind (`job`), for a command whose options
# typed so far are the namespace: commands.state_names, passed in by cli.
Names = Callable[[argparse.Namespace, str], list[str]]


def candidates(parser: argparse.ArgumentParser, words: Sequence[str],
               names: Names) -> list[str]:
    """What may replace the last of `words` (the words after the program name)."""
    commands = _subcommands(parser)
    *typed, current = words or [""]
    if not typed:
        if current.startswith("-"):
            return _matching(_flags(parser), current)
        return _matching(commands, current)
    command = commands.get(typed[0])
    if command is None:
        return []
    option = _option_before(command, typed[1:])
    if option is not None:
        if option.choices:
            return _matching([str(c) for c in option.choices], current)
        return [FILES] if set(option.option_strings) & _PATH_OPTIONS else []
    if current.startswith("-"):
        return _matching(_flags(command), current)
    return _positional(typed[0], command, typed[1:], current, names)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string, the long ones first."""
    strings = [s for a in parser._actions for s in a.option_strings]
    return [s for s in strings if s.startswith("--")] + [s for s in strings
                                                          if not s.startswith("--")]


def _matching(options: Sequence[str], current: str) -> list[str]:
    return [o for o in options if o.startswith(current)]


def _option_before(command: argparse.ArgumentParser, typed: Sequence[str]):
    """The option whose value is being typed (the word before takes one), else None."""
    if not typed:
        return None
    action = command._option_string_actions.get(typed[-1])
    return action if action is not None and action.nargs != 0 else None


def _given_positionals(command: argparse.ArgumentParser, typed: Sequence[str]) -> int:
    """How many positional arguments `typed` already holds (options and their values
    left out)."""
    count, skip = 0, False
    for word in typed:
        if skip:
            skip = False
        elif word.startswith("-"):
            action = command._option_string_actions.get(word)
            skip = action is not None and action.nargs != 0
        else:
            count += 1
    return count


def _positional(name: str, command: argparse.ArgumentParser, typed: Sequence[str],
                current: str, names: Names) -> list[str]:
    position = _given_positionals(command, typed)
    if name == "completion":
        return _matching(SHELLS, current) if position == 0 else []
    if name == "validate" or (name == "cp" and position == 1):
        return [FILES]
    if position > 0 or name not in ("get", "describe", "logs", "cp"):
        return []
    kinds = ("job",) if name in ("logs", "cp") else _KINDS
    if "/" not in current:
        plural = tuple(f"{k}s" for k in kinds) if name == "get" else ()
        return _matching([f"{k}/" for k in kinds] + list(plural), current)
    kind = current.split("/", 1)[0]
    if kind not in kinds:
        return []
    found = names(_typed_options(command, typed), kind)
    return _matching([f"{kind}/{n}" for n in found], current)


def _typed_options(command: argparse.ArgumentParser, typed: Sequence[str]) -> argparse.Namespace:
    """The command's defaults with the option values typed so far (`--state-dir DIR`,
    `--config FILE`): where the state is, without requiring the arguments still to come."""
    args = argparse.Namespace(**{a.dest: a.default for a in command._actions})
    for option, value in zip(typed, typed[1:], strict=False):
        action = command._option_string_actions.get(option)
        if action is not None and action.nargs != 0:
            setattr(args, action.dest, value)
    for name, value in command._defaults.items():
        setattr(args, name, value)
    return args


def script(shell: str, prog: str = "nodus-gitops") -> str:
    """The completion script for `shell`, completing `prog` through `prog __complete`."""
    return _SCRIPTS[shell].replace("PROG", prog).replace("FUNC", prog.replace("-", "_"))


_BASH = """\
# bash completion for PROG: `source <(PROG completion bash)`, or save it as
# ~/.local/share/bash-completion/completions/PROG
_FUNC() {
    local IFS=$'\\n' cur=${COMP_WORDS[COMP_CWORD]}
    local -a found
    found=($("${COMP_WORDS[0]}" __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null))
    if [[ ${#found[@]} -eq 1 && ${found[0]} == ":files" ]]; then
        compopt -o filenames 2>/dev/null
        COMPREPLY=($(compgen -f -- "$cur"))
        return
    fi
    COMPREPLY=("${found[@]}")
    if [[ ${#COMPREPLY[@]} -eq 1 && ${COMPREPLY[0]} == */ ]]; then
        compopt -o nospace 2>/dev/null
    fi
}
complete -F _FUNC PROG
"""

_ZSH = """\
#compdef PROG
# zsh completion for PROG: `source <(PROG completion zsh)` after compinit, or save it
# as _PROG in a folder of $fpath
_FUNC() {
    local -a found plain slash
    found=("${(@f)$(${words[1]} __complete "${(@)words[2,CURRENT]}" 2>/dev/null)}")
    found=(${found:#})
    if [[ ${#found} -eq 1 && ${found[1]} == ":files" ]]; then
        _files
        return
    fi
    local c
    for c in $found; do
        if [[ $c == */ ]]; then slash+=($c); else plain+=($c); fi
    done
    (( ${#plain} )) && compadd -- $plain
    (( ${#slash} )) && compadd -S '' -- $slash
    return 0
}
if (( $+functions[compdef] )); then
    compdef _FUNC PROG
fi
"""

_FISH = """\
# fish completion for PROG: `PROG completion fish | source`, or save it as
# ~/.config/fish/completions/PROG.fish
function __FUNC_complete
    set -l typed (commandline -opc)
    set -l current (commandline -ct)
    set -l found ($typed[1] __complete $typed[2..-1] $current 2>/dev/null)
    if test "$found" = ":files"
        __fish_complete_path $current
    else
        printf '%s\\n' $found
    end
end
complete -c PROG -f -a '(__FUNC_complete)'
"""

_SCRIPTS = {"bash": _BASH, "zsh": _ZSH, "fish": _FISH}


def main_complete(parser: argparse.ArgumentParser, words: Sequence[str], names: Names) -> int:
    """`PROG __complete WORD...`: the candidates, one a line."""
    for line in candidates(parser, words, names):
        sys.stdout.write(line + "\n")
    return 0
