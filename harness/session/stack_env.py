"""What sourcing a stack's env script changes (--ab-source, --previous-stack), in a throwaway bash:
the one part of the options that runs a shell."""
from __future__ import annotations

import os
import subprocess

from harness.session.option_error import OptionError

BASH_OWN = {"_", "SHLVL", "PWD", "OLDPWD", "COLUMNS", "LINES"}   # set by the shell itself, never by the script


def sourced_env(path: str, option: str = "--ab-source") -> dict[str, str | None]:
    """What sourcing the script (CANN's set_env.sh) changes: NAME -> VALUE, and NAME -> None for what it
    unsets; bash's environment read before and after, bash's own variables (SHLVL, PWD) left out."""
    if not path:
        return {}
    if not os.path.isfile(path):
        raise OptionError(f"{option} {path!r} is not a file: give a shell script to source (e.g. set_env.sh)")
    shell = 'env -0; printf "\\1\\0"; source "$1" >/dev/null 2>&1 || exit 97; env -0; printf "\\2\\0"'
    try:
        proc = subprocess.run(["bash", "-c", shell, "ab-source", path], capture_output=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise OptionError(f"{option} {path!r}: sourcing it did not return within 60 s in bash "
                          "(does it wait for input?)") from None
    if proc.returncode:
        raise OptionError(f"{option} {path!r}: sourcing it failed (exit {proc.returncode}) in bash")
    before, _, after = proc.stdout.decode(errors="replace").partition("\1\0")
    if not after.endswith("\2\0"):   # `exit` in the script ended the shell: nothing after it is known
        raise OptionError(f"{option} {path!r} ended the shell (exit) while being sourced: give a script that "
                          "returns, as set_env.sh does")

    def parsed(text: str) -> dict[str, str]:
        pairs = (item.split("=", 1) for item in text.split("\0") if "=" in item)
        return {k: v for k, v in pairs if k not in BASH_OWN}
    was, now = parsed(before), parsed(after)
    return {**{k: v for k, v in now.items() if not _same_value(was.get(k), v)}, **{k: None for k in was if k not in now}}


def _same_value(was: str | None, now: str) -> bool:
    """Equal, or the same path list once repeated entries are dropped (set_env.sh sourced again prepends
    its paths a second time, and that stack is this one)."""
    if was is None or was == now:
        return was == now
    entries = lambda value: list(dict.fromkeys(value.split(":")))  # noqa: E731
    return ":" in now and entries(was) == entries(now)


def previous_stack_kind(path: str) -> str:
    """'script' (sourced like --ab-source) or 'python' (a python* binary, run like HCCL_BENCH_PYTHON); else OptionError."""
    what = f"--previous-stack {path!r}"
    if not os.path.isfile(path):
        raise OptionError(f"{what} is not a file: give the previous stack's env script (set_env.sh) or its python interpreter")
    try:
        with open(path, "rb") as f:
            head = f.read(8192)
    except OSError as exc:
        raise OptionError(f"{what} cannot be read: {exc.strerror or exc}") from None
    if head.startswith(b"\x7fELF"):
        if not any(os.path.basename(p).startswith("python") for p in (path, os.path.realpath(path))):
            raise OptionError(f"{what} is a program but not a python interpreter: "
                              "give the previous stack's python or its env script")
        if not os.access(path, os.X_OK):
            raise OptionError(f"{what} is a python interpreter but not executable")
        return "python"
    first = head.split(b"\n", 1)[0]
    if b"\0" in head or (first.startswith(b"#!") and b"python" in first):
        raise OptionError(f"{what} is neither a shell script to source nor a python interpreter "
                          "(a Python script or another binary): give set_env.sh or the previous stack's python")
    return "script"

