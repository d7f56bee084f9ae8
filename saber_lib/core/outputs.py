"""The output folders of commands (``saber export``, ``saber leaderboard``, ``saber judge-check``):
a command writes its outputs into a new folder beside ``--out`` and then replaces ``--out`` with it,
so the folder holds what the last call wrote. A command never deletes what it did not write: its
marker file lists every file it wrote with its sha256, and a folder holding anything else (or a listed
file since edited) is refused with one line naming the file.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from .data import hash_file, regular_file, write_json

# in a folder a command (saber leaderboard, saber export) wrote: the command and every file it wrote
# with its sha256 ({"command": ..., "files": {relative path: sha256}}); a later call of the command
# replaces the folder only when it holds exactly those files, unchanged
OUTPUT_OWNER = ".saber-output.json"


class OutputFolderTaken(ValueError):
    """A command's output folder holds files that the command did not write."""


def output_target(out) -> Path:
    """The folder a command writes for ``--out OUT``: absolute, with symbolic links followed (a link
    keeps pointing at the folder, which is replaced; ``.`` is the current folder by its name)."""
    return Path(os.path.realpath(Path(out).expanduser()))


def _foreign_entry(out: Path, files: dict) -> str | None:
    """The first entry of ``out`` (sorted) that its marker's ``files`` do not account for: a file not
    listed, a listed file whose sha256 changed, a link or special file, a folder holding no listed file."""
    parents = {p.as_posix() for rel in files for p in Path(rel).parents}
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out).as_posix()
        if rel == OUTPUT_OWNER:
            continue
        if p.is_symlink() or not (p.is_file() or p.is_dir()):
            return f"{p} (not a file the command wrote)"
        if p.is_dir():
            if rel not in parents:
                return f"{p} (a folder the command did not write)"
        elif rel not in files:
            return f"{p} (not written by the command)"
        elif hash_file(p) != files[rel]:
            return f"{p} (changed since the command wrote it)"
    return None


def check_output_dir(out, command: str) -> None:
    """Refuse ``out`` when it is not empty and does not hold exactly what ``command`` wrote there last
    (its marker file lists each file with its sha256): one line naming the first other file."""
    out = Path(out)
    if not out.exists():
        return
    if not out.is_dir():
        raise OutputFolderTaken(f"{out}: exists and is not a folder")
    entries = sorted(p.name for p in out.iterdir())
    if not entries:
        return
    try:   # a FIFO or folder in its place is no marker (and is never opened)
        marker = json.loads(regular_file(out / OUTPUT_OWNER).read_text())
    except (OSError, ValueError):
        marker = None
    if not isinstance(marker, dict) or marker.get("command") != command:
        raise OutputFolderTaken(f"{out} is not empty ({len(entries)} entries, e.g. {entries[0]!r}) and was not "
                                f"written by {command}: nothing was changed; give an empty or new folder")
    files = marker.get("files")
    if not isinstance(files, dict):
        raise OutputFolderTaken(f"{out}: its {OUTPUT_OWNER} lists no files with their hashes (an older or "
                                f"copied marker), so {command} cannot tell its files from others: nothing "
                                f"was changed; empty the folder yourself or give an empty or new folder")
    foreign = _foreign_entry(out, files)
    if foreign:
        raise OutputFolderTaken(f"{foreign}: {command} replaces {out} only when it holds nothing but the files "
                                f"it wrote there: nothing was changed; move that out or give another folder")


def _folder_mode(out: Path) -> int:
    """The mode a new output folder gets: the folder's own when it exists, else the user's umask."""
    if out.is_dir():
        return out.stat().st_mode & 0o7777
    mask = os.umask(0)
    os.umask(mask)
    return 0o777 & ~mask


class OutputFolderUnwritable(OutputFolderTaken):
    """A command's output folder cannot be made where it was asked for (the message names it)."""


def output_work_dir(out) -> Path:
    """A new empty folder beside ``out`` for a command to write its outputs into before they replace
    ``out`` (:func:`replace_output_dir`). Raises :class:`OutputFolderUnwritable` naming ``out`` (never
    the temporary folder) when no folder can be made there: a parent that is a file, a read-only or
    special file system, no permission."""
    out = Path(out)
    try:
        for parent in (out.parent, *out.parent.parents):   # the nearest existing one must be a folder
            if parent.exists():
                if not parent.is_dir():
                    raise OutputFolderUnwritable(f"{out}: cannot make the output folder there: {parent} is "
                                                 "not a folder")
                break
        out.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as e:
        raise OutputFolderUnwritable(f"{out}: cannot make the output folder in {out.parent}: "
                                     f"{(e.strerror or str(e)).lower()}") from None


def replace_output_dir(done: Path, out, command: str) -> Path:
    """Make the folder ``done`` (the command's complete outputs, beside ``out``) the new ``out``: the
    folder then holds what this call wrote and nothing else. An earlier call's files go only when
    the folder holds nothing else (:func:`check_output_dir`); its marker lists what this call wrote."""
    done, out = Path(done), output_target(out)
    check_output_dir(out, command)
    files = {p.relative_to(done).as_posix(): hash_file(p) for p in sorted(done.rglob("*"))
             if p.is_file() and p.name != OUTPUT_OWNER}
    write_json(done / OUTPUT_OWNER, {"command": command, "files": files})
    os.chmod(done, _folder_mode(out))   # mkdtemp made it 0700
    if out.is_dir() and Path.cwd().is_relative_to(out):
        return _replace_in_place(done, out)   # renaming it away would leave the shell in a deleted folder
    old = out.with_name(f".{out.name}.old{os.getpid()}") if out.exists() else None
    if old is not None:
        os.replace(out, old)
    os.replace(done, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return out


def _replace_in_place(done: Path, out: Path) -> Path:
    """:func:`replace_output_dir` for the current folder (or one holding it), which stays where it is:
    the marker goes first (a call interrupted midway leaves a folder the next call refuses, never one
    it may empty), then the earlier call's files (checked), then this call's files move in, marker last."""
    listed = json.loads((out / OUTPUT_OWNER).read_text())["files"] if (out / OUTPUT_OWNER).exists() else {}
    (out / OUTPUT_OWNER).unlink(missing_ok=True)
    for rel in listed:
        (out / rel).unlink(missing_ok=True)
    for d in sorted({p for rel in listed for p in Path(rel).parents if str(p) != "."}, key=lambda p: -len(p.parts)):
        try:
            (out / d).rmdir()
        except OSError:
            pass  # holds something else (cannot happen after the check) or is the cwd
    for p in sorted(done.iterdir()):
        if p.name != OUTPUT_OWNER:
            if p.is_dir() and (out / p.name).is_dir():
                shutil.copytree(p, out / p.name, dirs_exist_ok=True)
            else:
                os.replace(p, out / p.name)
    os.replace(done / OUTPUT_OWNER, out / OUTPUT_OWNER)
    return out
