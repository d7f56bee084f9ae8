"""The value types of the profile schema (range-checked ints and floats, strings, lists, maps) and
:class:`ProfileError`, the one error every bad profile raises."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable


class ProfileError(ValueError):
    """A profile that cannot be used; the message names the file and the key."""


# ----------------------------------------------------------------------------- value types
INT_MAX = 2**31 - 1   # every count, size and seed of the pipeline fits a 32-bit integer


@dataclass(frozen=True)
class Int:
    """An integer in ``[lo, hi]``; without ``hi``, at most :data:`INT_MAX` (a larger count would
    overflow the arrays that hold it later, far from the profile)."""

    lo: int | None = None
    hi: int | None = None
    nullable: bool = False

    def check(self, v):
        if v is None and self.nullable:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            return f"expected an integer, got {v!r}"
        if self.lo is not None and v < self.lo:
            return f"{v} is below the minimum {self.lo}"
        hi = INT_MAX if self.hi is None else self.hi
        if v > hi:
            return f"{v} is above the maximum {hi}"
        return None


@dataclass(frozen=True)
class Float:
    lo: float | None = None
    hi: float | None = None
    nullable: bool = False

    def check(self, v):
        if v is None and self.nullable:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return f"expected a number, got {v!r}"
        if not math.isfinite(v):
            return f"{v!r} is not a finite number"
        if self.lo is not None and v < self.lo:
            return f"{v} is below the minimum {self.lo}"
        if self.hi is not None and v > self.hi:
            return f"{v} is above the maximum {self.hi}"
        return None


@dataclass(frozen=True)
class Str:
    choices: tuple | None = None
    nullable: bool = False
    # the value names a file or folder read as an input, relative to "data" (the data directory) or
    # "project" (the project root): hashed as an input of the stages taking its section (pipeline/path_inputs)
    path: str | None = None

    def check(self, v):
        if v is None and self.nullable:
            return None
        if not isinstance(v, str):
            return f"expected a string, got {v!r}"
        if self.choices is not None and v not in self.choices:
            return f"{v!r} is not one of {list(self.choices)}"
        return None


# Checks of spec-valued keys whose valid values an upper layer knows (a judge spec: the judge registry,
# saber_lib.judging.registry, registers "judge" here when it is imported; plugins register their kinds
# there). kind -> check(key, value, the profile's values by section) -> error or None.
SPEC_CHECKS: dict[str, Callable[[str, str, dict], str | None]] = {}


@dataclass(frozen=True)
class Spec(Str):
    """A string written in a small language that an upper layer parses (``kind``: ``"judge"``). Its type
    is checked here; its meaning by ``SPEC_CHECKS[kind]`` once the whole profile is read
    (``config._cross_checks``), so that plugins named in the profile are loaded first."""

    kind: str = ""


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class EnvName:
    """The name of an environment variable (``[A-Za-z_][A-Za-z0-9_]*``), e.g. the one that holds an API
    key. Anything else is refused WITHOUT quoting it: a value typed here by mistake is most likely
    the secret itself (``--set llm.api_key_env=sk-...``), which must reach no message and no file."""

    def check(self, v):
        if isinstance(v, str) and _ENV_NAME.fullmatch(v):
            return None
        what = f"a {type(v).__name__}" if not isinstance(v, str) else f"a text of {len(v)} characters"
        return (f"expected the name of an environment variable (letters, digits and _, e.g. OPENAI_API_KEY), "
                f"got {what} that is not one (not shown: it may be the secret itself; give the variable's "
                f"name and put the secret in that variable)")


@dataclass(frozen=True)
class Bool:
    def check(self, v):
        return None if isinstance(v, bool) else f"expected true or false, got {v!r}"


def _unshown(v) -> str:
    """A value named by its type only: a key that may hold a secret (a URL with its password, a token)
    never has its value quoted in an error."""
    return f"a {type(v).__name__} (not shown: it may hold a password or a token)"


@dataclass(frozen=True)
class List:
    item: Any
    min_len: int = 0
    shown: bool = True    # False: errors never quote the value (it may hold a secret)

    def check(self, v):
        if not isinstance(v, list):
            return f"expected a list, got {repr(v) if self.shown else _unshown(v)}"
        if len(v) < self.min_len:
            return f"expected at least {self.min_len} entries"
        for i, x in enumerate(v):
            err = self.item.check(x)
            if err:
                return f"entry {i}: {err if self.shown else 'not valid: ' + _unshown(x)}"
        return None


@dataclass(frozen=True)
class Map:
    """A free mapping from string keys to values of one type (e.g. model name -> MTEB score)."""

    value: Any
    shown: bool = True    # False: errors never quote the value (it may hold a secret)

    def check(self, v):
        if not isinstance(v, dict):
            return f"expected a mapping, got {repr(v) if self.shown else _unshown(v)}"
        for k, x in v.items():
            if not isinstance(k, str):
                return f"key {k!r} is not a string"
            err = self.value.check(x)
            if err:
                return f"{k}: {err if self.shown else 'not valid: ' + _unshown(x)}"
        return None


@dataclass(frozen=True)
class Any_:
    def check(self, v):
        return None


PROB = Float(0.0, 1.0)
