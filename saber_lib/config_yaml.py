"""Reading profile YAML files: a key written twice in one mapping is an error (file and line), YAML
errors become one line, and ``inherit:`` chains are followed (a cycle is an error)."""
from __future__ import annotations

from pathlib import Path

import yaml

from .config_types import ProfileError


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
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProfileError(f"{path}: profile file not found") from None
    except UnicodeDecodeError as e:
        raise ProfileError(f"{path}: not UTF-8 text (byte offset {e.start})") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader) or {}
    except _DuplicateKey as d:
        raise ProfileError(f"{path} line {d.line}: key {d.key!r} is written twice in one mapping "
                           f"(first at line {d.first_line}); keep one") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ProfileError(f"{path}{where}: not valid YAML: {yaml_error_line(e)}") from None
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
        layers = load_layers(path.parent / parent, seen + (path,))
    return layers + [(path, data)]
