"""Reading profile YAML files: a key written twice in one mapping is an error (file and line), YAML
errors become one line, and ``inherit:`` chains are followed (a cycle is an error).

A profile is a few kilobytes of settings, so a file over :data:`MAX_PROFILE_BYTES`, or one whose
aliases (``*anchor``) would expand it to more than :data:`MAX_EXPANDED_NODES` values (an "alias
bomb": a few hundred bytes that unfold into billions of list entries once hashed or printed), is
refused when it is read, with one error naming the file."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import yaml

from .config_types import ProfileError

MAX_PROFILE_BYTES = 1 << 20        # 1 MiB; the shipped profiles are under 20 KB
MAX_EXPANDED_NODES = 100_000       # YAML values once every alias is unfolded; paper.yaml has ~430


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe YAML loader that refuses a key written twice in one mapping (PyYAML keeps the last)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # '<<: *anchor' merges are PyYAML's business
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: let PyYAML report it
                continue
            if first is not None:
                raise _DuplicateKey(key, first, key_node.start_mark.line + 1)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def expanded_size(node, limit: int) -> int:
    """How many YAML values ``node`` unfolds to with every alias expanded (counted once per use,
    memoized per node, so the count itself stays cheap); stops counting past ``limit``."""
    memo: dict[int, int] = {}

    def size(n, depth: int) -> int:
        if id(n) in memo:
            return memo[id(n)]
        if depth > 200:   # deeper than any profile: treat as over the limit
            return limit + 1
        total = 1
        if isinstance(n, yaml.SequenceNode):
            children = n.value
        elif isinstance(n, yaml.MappingNode):
            children = [c for pair in n.value for c in pair]
        else:
            children = []
        for c in children:
            total += size(c, depth + 1)
            if total > limit:
                break
        memo[id(n)] = total
        return total

    return size(node, 0)


class _DuplicateKey(Exception):
    def __init__(self, key, first_line: int, line: int):
        super().__init__(key, first_line, line)
        self.key, self.first_line, self.line = key, first_line, line


def yaml_error_line(e: yaml.YAMLError) -> str:
    """A one-line description of a YAML error: the problem and where it is (PyYAML's own message
    spans several lines and quotes the text)."""
    problem = getattr(e, "problem", None) or getattr(e, "context", None) or str(e).splitlines()[0]
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return f"{problem}{where}"


def read_yaml(path: Path) -> dict:
    try:   # looked at before it is opened: a FIFO would block the open, a folder fails it
        st = os.stat(path)
    except FileNotFoundError:
        raise ProfileError(f"{path}: profile file not found") from None
    except OSError as e:   # a symbolic-link loop, a permission
        raise ProfileError(f"{path}: cannot read the profile file: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        what = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise ProfileError(f"{path}: is {what}, not a profile file; name a .yaml file")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProfileError(f"{path}: profile file not found") from None
    except OSError as e:
        raise ProfileError(f"{path}: cannot read the profile file: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ProfileError(f"{path}: not UTF-8 text (byte offset {e.start})") from None
    if len(text.encode("utf-8")) > MAX_PROFILE_BYTES:
        raise ProfileError(f"{path}: {len(text.encode('utf-8')):,} bytes, more than a profile may hold "
                           f"({MAX_PROFILE_BYTES:,}); a profile holds settings, not data")
    loader = _UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None and expanded_size(node, MAX_EXPANDED_NODES) > MAX_EXPANDED_NODES:
            raise ProfileError(f"{path}: its YAML aliases (*name) expand to more than {MAX_EXPANDED_NODES:,} "
                               "values (an alias bomb?); write the values out or use fewer aliases")
        data = (loader.construct_document(node) if node is not None else None) or {}
    except _DuplicateKey as d:
        raise ProfileError(f"{path} line {d.line}: key {d.key!r} is written twice in one mapping "
                           f"(first at line {d.first_line}); keep one") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ProfileError(f"{path}{where}: not valid YAML: {yaml_error_line(e)}") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: a profile must be a mapping of sections")
    return data


def load_layers(path: Path, seen: tuple = ()) -> list[tuple[Path, dict]]:
    path = path.resolve()
    if path in seen:
        raise ProfileError(f"{path}: 'inherit' forms a cycle")
    data = read_yaml(path)
    parent = data.pop("inherit", None)
    layers: list[tuple[Path, dict]] = []
    if parent is not None:
        if not isinstance(parent, str):
            raise ProfileError(f"{path}: key 'inherit' must be a file name")
        if (path.parent / parent).is_dir():
            raise ProfileError(f"{path}: 'inherit: {parent}' names a folder ({path.parent / parent}), "
                               "not a profile file")
        layers = load_layers(path.parent / parent, seen + (path,))
    return layers + [(path, data)]
