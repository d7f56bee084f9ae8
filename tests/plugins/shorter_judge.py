"""A judge plugin as a user writes one (one file): the candidate with the shorter text wins, equal
lengths tie. Imported by tests/test_judge_registry.py and by ``saber judge-check`` in a subprocess."""
from saber_lib.judging import Judge, register_judge


class ShorterJudge(Judge):
    name = "shorter text wins"

    def judge_pairs(self, items):
        def size(x):
            return len(x if isinstance(x, str) else x.text)
        return self._count([1 if size(a) < size(b) else 2 if size(b) < size(a) else 0 for _q, a, b in items])


@register_judge("shorter")
def shorter(arg):
    return ShorterJudge()
