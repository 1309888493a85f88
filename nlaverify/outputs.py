"""Output paths, probed before any work starts: a command that would train for minutes or
derive for seconds first creates (and removes) a file where it will write, so that a path it
cannot write ends it at once, naming the option, instead of losing the results."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from nlaverify.errors import ArgumentError

__all__ = ["probe_folder", "probe_output"]


def probe_folder(folder: str | os.PathLike, option: str, command: str, *,
                 shown: str | os.PathLike | None = None) -> Path:
    """Create and remove a temporary file in ``folder`` (created if missing, as the writer
    would), or raise :class:`~nlaverify.errors.ArgumentError` naming ``option`` and the path
    the user gave (``shown``, default ``folder``)."""
    target = Path(folder)
    shown = folder if shown is None else shown
    try:
        target.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=".nlaverify-probe-", dir=target)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        raise ArgumentError(f"{command}: {option} {str(shown)!r}: cannot write a file in "
                            f"{str(target)!r} ({exc.strerror or exc})") from exc
    return target


def probe_output(path: str | os.PathLike, option: str, command: str) -> Path:
    """Probe the folder of the output file ``path`` (:func:`probe_folder`); an existing
    folder at ``path`` itself is refused too."""
    target = Path(path)
    if target.is_dir():
        raise ArgumentError(f"{command}: {option} {str(path)!r}: expected a file, got a folder")
    probe_folder(target.resolve().parent, option, command, shown=path)
    return target
