"""The checks of a profile's retriever and encoder names against the registries, run when a
profile is loaded for a run (after its ``run.plugins`` are imported), each failure one
:class:`~saber_lib.core.config_types.ProfileError` naming the file that set the key. (A judge spec,
with the proxy judge's guard against an evaluated retriever's encoder, is checked by the judge
registry when the profile is loaded.)"""
from __future__ import annotations

from pathlib import Path

from .. import embed
from ..core.config import Profile
from ..core.config_types import ProfileError
from .registry import file_argument, open_corpus_system_error, retriever_name_error

# (section, key, whether the stage scores rewritten queries: no fixed-score run files there)
RETRIEVER_KEYS = (("evaluate", "retrievers", False), ("math_vs_words", "mvw_retrievers", True),
                  ("robustness", "rr_retrievers", True))
ENCODER_KEYS = (("topics", "topic_embed_model"), ("summaries", "summary_embed_model"),
                ("tournament", "judge_embed_model"))


def check_profile(p: Profile) -> None:
    """Raise a :class:`ProfileError` for the first name no registry resolves (see module doc)."""
    def fail(sec, key, msg):
        raise ProfileError(f"{p.origin.get((sec, key), p.path)}: {sec}.{key}: {msg}")

    for sec, key, rescoring in RETRIEVER_KEYS:
        names = p.values[sec][key]
        for name in names:
            err = retriever_name_error(name, rescoring=rescoring)
            if err:
                fail(sec, key, err)
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            fail(sec, key, f"{', '.join(map(repr, dup))} listed twice")
        stems: dict[str, str] = {}   # a run file's retriever is named <prefix><file stem>
        for name in names:
            path = file_argument(name)
            if path is None:
                continue
            stem = Path(path).stem
            if stem in stems:
                fail(sec, key, f"run files {stems[stem]!r} and {path!r} have the same file name {stem!r}, and a "
                               f"run file's scores are named after it ({name[:len(name) - len(path)].strip()}{stem}); "
                               f"rename one of them")
            stems[stem] = path

    for sec, key in ENCODER_KEYS:
        if p.values[sec][key] not in embed.REGISTRY:
            fail(sec, key, f"unknown encoder {p.values[sec][key]!r} (known: {', '.join(embed.REGISTRY)})")

    for name in p.values["open_corpus"]["oc_systems"]:
        err = open_corpus_system_error(name)
        if err:
            fail("open_corpus", "oc_systems", err)
