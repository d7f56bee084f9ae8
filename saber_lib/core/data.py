"""Files: where the reference data lives (a clear error when a file is missing), the project root, artifact
hashing and atomic writing, a stage's manifest and recorded outputs with their check (the one check every command
runs before it reads a stage: :func:`require_verified`), strict JSON, package versions; commands' output folders
are in :mod:`saber_lib.core.outputs`.

The data directory is, in order: an explicit parameter (``run.data_dir``), the environment variable
``SABER_DATA_DIR``, or ``../shared/data`` beside the project. Files are read in place, never copied.
"""
from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import stat
import threading
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

PROJECT_ROOT = Path(__file__).resolve().parents[2]   # saber_lib/core/data.py -> the project


def default_cache_dir() -> Path:
    """Where registry models and the embedding store live by default: ``$SABER_CACHE_DIR``, else ``runs/_cache``."""
    return Path(os.environ.get("SABER_CACHE_DIR") or PROJECT_ROOT / "runs" / "_cache")

# Public origin of every file (see ../shared/data/README.md): repository @ commit : path.
ORIGINS = {
    "ontology/mathworld_tree.json": "github.com/nygeorgiev/sabermath @ 9f015a7 : build_benchmark/assets/tree.json",
    "sources/imo_proofbench/proofbench_v2.csv": "github.com/google-deepmind/superhuman @ a02069e : imobench/proofbench_v2.csv",
    "sources/harp_proof/HARP_proof-based.jsonl.zip": "github.com/aadityasingh/HARP @ dac2734 : HARP_proof-based.jsonl.zip",
    "sources/aime/aime.json": "github.com/agentica-project/rllm @ 874daa4 : rllm/data/train/math/aime.json",
    "sources/aime/aops_subject_labels.jsonl": "github.com/aadityasingh/HARP @ dac2734 : aops_subject_labels.jsonl",
    "sources/olympiadbench/test.jsonl": "github.com/QwenLM/Qwen2.5-Math @ a45202b : evaluation/data/olympiadbench/test.jsonl",
    "sources/omni_math_rule/omni_math_rule.jsonl": "github.com/KbsdJames/omni-math-rule @ 4793415 : omni_math_rule.jsonl",
    "sources/math/math.jsonl": "github.com/aiwaves-cn/agents @ e8c4e3c : src/agents/datasets/data/math/{train,test}/<subject>/<n>.json, joined into JSON lines",
    "sources/proofnet/valid.jsonl": "github.com/zhangir-azerbayev/ProofNet @ 509ad79 : benchmark/valid.jsonl",
    "sources/proofnet/test.jsonl": "github.com/zhangir-azerbayev/ProofNet @ 509ad79 : benchmark/test.jsonl",
    "sources/minif2f/informal.jsonl": "github.com/facebookresearch/miniF2F @ e4f1130 : informal/{valid,test}/*.json, joined into JSON lines",
}


class DataFileMissing(FileNotFoundError):
    pass


class NotAFile(FileNotFoundError):
    """There is no readable file at a path where a file should be: a folder, a FIFO, a socket, a
    device, or a symbolic-link loop is there. (A :class:`FileNotFoundError`, so every command that
    reports a missing file reports this one, in one line naming the path.)"""


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def regular_file(path, what: str = "file") -> Path:
    """``path`` when a regular file is there (following links); raises :class:`NotAFile` naming it when
    something else is (it is never opened: opening a FIFO waits for a writer that never comes), and
    ``FileNotFoundError`` when nothing is."""
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise
    except OSError as e:    # ELOOP (a link that leads back to itself), ENOTDIR, EACCES, ...
        hint = " (a symbolic link that leads back to itself)" if e.errno == errno.ELOOP else ""
        raise NotAFile(f"{what} {path}: cannot be read: {e.strerror}{hint}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise NotAFile(f"{what} {path} is {kind}, not a file; put the file itself there")
    return path


class NotAFolder(FileNotFoundError):
    """Something other than a folder is where a folder should be (a file, a FIFO, ...), at the path
    or at one of its parents. (A :class:`FileNotFoundError`: every command reports it in one line.)"""


def folder_path(path, what: str = "folder") -> Path:
    """``path`` when a folder is there or one can be made there: raises :class:`NotAFolder` naming it
    when a file (or anything but a folder) is at the path or at its nearest existing parent."""
    path = Path(path)
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                kind = "a file" if p.is_file() else next(
                    (name for test, name in _KINDS if test(os.stat(p).st_mode)), "not a folder")
                where = "" if p == path else "its parent "
                raise NotAFolder(f"{what} {path}: {where}{p} is {kind}, not a folder; give a folder")
            break
    return path


def existing_file(path, what: str = "file") -> Path:
    """:func:`regular_file`, with nothing there one ``FileNotFoundError`` saying ``<what> <path> does
    not exist`` (a folder or FIFO there is :class:`NotAFile`, named as what it is)."""
    try:
        return regular_file(path, what)
    except NotAFile:
        raise
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} {path} does not exist") from None


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    if data_dir:
        return Path(data_dir).expanduser().resolve()
    env = os.environ.get("SABER_DATA_DIR")
    if env:
        return Path(env).expanduser().resolve()
    return (PROJECT_ROOT.parent / "shared" / "data").resolve()


def data_file(data_dir, rel: str) -> Path:
    """The path of ``rel`` inside the data directory; raises naming the file and its origin."""
    path = resolve_data_dir(data_dir) / rel
    try:   # a folder, FIFO or link loop there is named as what it is (and a FIFO is never opened)
        return regular_file(path, "data file")
    except NotAFile:
        raise
    except FileNotFoundError:
        origin = ORIGINS.get(rel, "see data/README.md of the shared data folder")
        raise DataFileMissing(
            f"data file missing: {path}\n  download it from {origin}\n"
            f"  (or point run.data_dir / $SABER_DATA_DIR at a folder that holds {rel})") from None


# ----------------------------------------------------------------------------- artifact files
META_FILES = ("manifest.json", "info.json")
# timing tables: run-to-run noise by nature (e.g. the evaluate stage's per-query seconds). They stay in
# the stage folder to be read, but like the meta files they are no artifact: not hashed, not recorded,
# not verified, so that a rerun with the same inputs keeps the same output hash
TIMING_FILES = ("latency.parquet",)
# what a write leaves beside its file until it is renamed over it: ``<name>.tmp<pid>``
# (:func:`atomic_write`), ``.<name>.tmp-<pid>`` (cached indexes), ``<name>.part`` (signal arrays)
_TEMP_NAME = re.compile(r"\.tmp-?\d+$|\.part$")


def is_temp_file(path) -> bool:
    """Whether ``path`` is a temporary file of a write that has not finished: a process killed
    mid-write leaves it behind, so it is never an artifact (half-written)."""
    return bool(_TEMP_NAME.search(Path(path).name))


def artifact_files(stage_dir: Path) -> list[Path]:
    """The artifact files of a stage folder, sorted: every file but the meta files, the timing tables
    (:data:`TIMING_FILES`) and the temporary files of unfinished writes (:func:`temp_files`)."""
    stage_dir = Path(stage_dir)
    if not stage_dir.exists():
        return []
    return [p for p in sorted(stage_dir.rglob("*"))
            if p.is_file() and p.name not in META_FILES + TIMING_FILES and not is_temp_file(p)]


def temp_files(folder: Path) -> list[Path]:
    """The temporary files of unfinished writes under ``folder`` (:func:`is_temp_file`), sorted."""
    folder = Path(folder)
    return [p for p in sorted(folder.rglob("*")) if p.is_file() and is_temp_file(p)] if folder.exists() else []


def hash_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(regular_file(path), "rb") as f:   # a FIFO would block the open: refused before
        while b := f.read(chunk):
            h.update(b)
    return h.hexdigest()


def hash_stage_outputs(stage_dir: Path) -> str:
    """sha256 over (relative path, content hash) of every artifact file (:func:`artifact_files`)."""
    h = hashlib.sha256()
    for p in artifact_files(stage_dir):
        h.update(str(p.relative_to(stage_dir)).encode())
        h.update(hash_file(p).encode())
    return h.hexdigest()


class DiskFull(OSError):
    """No space left on the device (or quota) while writing a file; the message names the file."""


def atomic_write(path, write: Callable[[Path], object]) -> None:
    """Write ``path`` whole or not at all: ``write(tmp)`` writes ``<name>.tmp<pid><thread id>`` beside it
    (no two threads share one), renamed over ``path`` then. On any failure (``write`` raising, an
    interrupt) it is removed and ``path`` left as it was; a full disk raises :class:`DiskFull` naming
    ``path``. A process killed mid-write leaves it, which :func:`is_temp_file` recognises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}{threading.get_native_id()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            full = DiskFull(f"no space left on device: cannot write {path} (it was left as it was); "
                            "free some space and rerun")
            full.errno = e.errno
            raise full from None
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """:func:`atomic_write` of a text."""
    atomic_write(path, lambda tmp: tmp.write_text(text))


def to_jsonable(obj):
    """Make numpy scalars/arrays and paths JSON-serializable."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    return obj


def write_json(path: Path, obj: Any) -> None:
    atomic_write_text(Path(path), json.dumps(to_jsonable(obj), indent=2, sort_keys=True) + "\n")


# ----------------------------------------------------------------------------- a stage's recorded outputs
def output_records(stage_dir: Path) -> dict[str, dict]:
    """``{relative path: {size, mtime_ns, sha256}}`` of every artifact file (meta files and the
    temporary files of unfinished writes excluded: :func:`artifact_files`), in the order
    :func:`hash_stage_outputs` hashes them."""
    out = {}
    stage_dir = Path(stage_dir)
    for p in artifact_files(stage_dir):
        st = p.stat()
        out[str(p.relative_to(stage_dir))] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns,
                                              "sha256": hash_file(p)}
    return out


def timing_files(stage_dir: Path) -> list[str]:
    """The timing tables (:data:`TIMING_FILES`) a stage folder holds, as paths relative to it: the
    manifest lists them so that a deleted or unreadable one is found (:func:`changed_outputs`)."""
    stage_dir = Path(stage_dir)
    return [str(p.relative_to(stage_dir)) for p in sorted(stage_dir.rglob("*"))
            if p.name in TIMING_FILES and p.is_file()] if stage_dir.exists() else []


def _unreadable(path: Path) -> str | None:
    """Why a timing table cannot be read (None when it can): a Parquet file must open and close with
    its magic bytes (a cut, padded or overwritten file does not)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(size - 4, 0))
            tail = f.read(4)
    except OSError as e:
        return f"cannot be read: {e.strerror}"
    if path.suffix == ".parquet" and (size < 12 or head != b"PAR1" or tail != b"PAR1"):
        return "not a readable Parquet file"
    return None


def changed_timing_files(stage_dir: Path, manifest: dict, full: bool = False) -> list[str]:
    """The timing tables the manifest lists that are gone, or (with ``full``) no longer readable:
    their numbers are noise and stay out of the output hash, but not their presence."""
    out = []
    for rel in manifest.get("timing_files") or []:
        p = Path(stage_dir) / rel
        if not p.is_file():
            out.append(f"{p} (deleted)")
        elif full and (why := _unreadable(p)):
            out.append(f"{p} ({why})")
    return out


def output_hash_of(records: dict[str, dict]) -> str:
    """The stage's output hash from its records (equal to ``hash_stage_outputs`` of the folder)."""
    h = hashlib.sha256()
    for rel in sorted(records, key=Path):
        h.update(rel.encode())
        h.update(records[rel]["sha256"].encode())
    return h.hexdigest()


HALF_WRITTEN = "half-written: a write was interrupted before its file was complete"


def half_written(stage_dir: Path) -> list[str]:
    """The temporary files of unfinished writes in a stage folder (a process killed mid-write left
    them), as ``path (half-written: ...)``; never outputs."""
    return [f"{p} ({HALF_WRITTEN})" for p in temp_files(stage_dir)]


def changed_outputs(stage_dir: Path, manifest: dict, full: bool = False) -> list[str]:
    """The artifact files of a finished stage that differ from what its manifest recorded:
    ``path`` (content changed), ``path (deleted)``, ``path (new)``, and a temporary file of a write
    that never finished as ``path (half-written: ...)``, a timing table the manifest lists that is gone
    or unreadable (:func:`changed_timing_files`). Size and mtime first; a file is
    hashed only when one of them differs (a copy with new mtimes but the same bytes is unchanged),
    or always with ``full`` (an edit that kept the size and restored the mtime is found)."""
    stage_dir = Path(stage_dir)
    recs = manifest.get("outputs")
    changed = half_written(stage_dir)
    if recs is None:  # a manifest from before outputs were recorded: the folder's hash
        same = hash_stage_outputs(stage_dir) == manifest.get("output_hash")
        return changed if same else changed + [f"{stage_dir}/* (output hash differs)"]
    for rel, r in recs.items():
        p = stage_dir / rel
        try:
            st = p.stat()
        except FileNotFoundError:
            changed.append(f"{p} (deleted)")
            continue
        if st.st_size == r["size"] and st.st_mtime_ns == r["mtime_ns"] and not full:
            continue
        if st.st_size != r["size"] or hash_file(p) != r["sha256"]:
            changed.append(str(p))
    for p in artifact_files(stage_dir):
        if str(p.relative_to(stage_dir)) not in recs:
            changed.append(f"{p} (new)")
    return changed + changed_timing_files(stage_dir, manifest, full)


class ArtifactModified(RuntimeError):
    """A finished stage's artifact changed on disk after the stage wrote it."""


def modified_message(stage: str, files: list[str], run_dir: Path, params) -> str:
    shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    return (f"stage {stage!r}: {shown} changed since the stage wrote it; nothing reads it until you "
            f"either regenerate it (saber run {stage} --force --params {params} --run-dir {run_dir}) "
            f"or keep the edit (saber accept {stage} --run-dir {run_dir}), which reruns what reads it")


class StageUnfinished(RuntimeError):
    """A command reads a stage that has no manifest (it never finished, or its manifest is gone)."""


class ManifestDamaged(StageUnfinished, ValueError):
    """A stage's ``manifest.json`` that is no JSON object in a regular file (cut short, edited, a folder)."""


def load_manifest(path) -> dict | None:
    """The manifest at ``path`` (``<run>/<stage>/manifest.json``), None when nothing is there; :class:`ManifestDamaged`
    naming it and the way out when it is not one JSON object in a file."""
    path, man = Path(path), None
    if not os.path.lexists(path):
        return None
    try:
        man = json.loads(read_text(regular_file(path, "manifest")))
        why = f"it holds JSON of type {type(man).__name__}, not an object"
    except (OSError, ValueError) as e:        # a folder or FIFO there (never opened), bad bytes, not JSON
        why = "it is a folder, not a file" if path.is_dir() else f"not valid JSON: {e}" if isinstance(e, json.JSONDecodeError) else str(e)
    if not isinstance(man, dict):
        raise ManifestDamaged(f"{path}: the stage's manifest is damaged ({why}): remove it and run the stage "
                              f"again (saber run {path.parent.name} --params PROFILE --run-dir {path.parent.parent})")
    return man


def require_verified(run_dir: Path, stage: str) -> dict:
    """The manifest of a finished stage whose every recorded file still hashes as recorded (what a
    command outside ``saber run`` reads: ``export``, ``leaderboard``); otherwise the runner's
    one-line error: :class:`ArtifactModified` naming the changed files, or :class:`StageUnfinished`."""
    run_dir = Path(run_dir).resolve()
    path = run_dir / stage / "manifest.json"
    man = load_manifest(path)
    if man is None:
        raise StageUnfinished(f"stage {stage!r} has not finished in {run_dir} ({path} is missing): "
                              f"run it first (saber run {stage} --params PROFILE --run-dir {run_dir})")
    files = changed_outputs(run_dir / stage, man, full=True)
    if files:
        raise ArtifactModified(modified_message(stage, files, run_dir, man.get("profile") or "PROFILE"))
    return man


# ----------------------------------------------------------------------------- strict JSON
class AmbiguousJSON(ValueError):
    """JSON that ``json.loads`` accepts but that readers may read differently."""


def _unique_keys(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise AmbiguousJSON(f"key {key!r} appears twice in one object (a reader would keep either value)")
        out[key] = value
    return out


def _no_constant(name):
    raise AmbiguousJSON(f"{name} is not JSON (a non-standard extension)")


def _finite_float(text):
    v = float(text)
    if not math.isfinite(v):
        raise AmbiguousJSON(f"number {text} overflows to {v}")
    return v


def strict_json_loads(text: str):
    """``json.loads`` that raises :class:`AmbiguousJSON` on a key twice in one object, on NaN or
    Infinity, and on a number too large for a float."""
    return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant, parse_float=_finite_float)


# ----------------------------------------------------------------------------- package versions
def package_version(dist: str) -> str | None:
    """The installed version of distribution ``dist``, or None when it is not installed."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


class NotUTF8(ValueError):
    """A text file that is not UTF-8; the message names the file, byte offset and line (``reason``, ``offset``: the decoder's)."""

    reason: str = ""
    offset: int = 0


def decode_utf8(data: bytes, path) -> str:
    """``data`` (the bytes of ``path``) as text, a leading byte-order mark dropped; raises :class:`NotUTF8`
    naming the file, the byte offset of the first bad byte and its line, in place of Python's bare
    ``UnicodeDecodeError`` (which names neither file nor line)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        err = NotUTF8(f"{path}: not UTF-8 text: byte 0x{data[e.start]:02x} at byte offset {e.start} "
                      f"(line {line}): {e.reason}; save the file as UTF-8")
        err.reason, err.offset = e.reason, e.start
        raise err from None
    return text[1:] if text.startswith("\ufeff") else text


def read_text(path) -> str:
    """The text of a UTF-8 file (see :func:`decode_utf8` for the error on bad bytes)."""
    return decode_utf8(Path(path).read_bytes(), path)
