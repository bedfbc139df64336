"""YAML as opatlas reads users' files: safe, and a mapping key given twice is an error naming
the file, the key and both lines (YAML itself lets the last one win, silently)."""

from __future__ import annotations

from typing import Any

import yaml

from opatlas.errors import SpecError

_MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping key given twice in one YAML mapping (which YAML would let the last win).
    ``key``: its dotted path (``params.l``); ``lines``: where it is given, first then again."""

    def __init__(self, key: str, first: yaml.Mark, again: yaml.Mark) -> None:
        self.key, self.lines = key, (first.line + 1, again.line + 1)
        super().__init__("while reading a mapping", first,
                         f"key '{key}' is given twice (first at line {first.line + 1})", again)


class UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """``yaml.safe_load`` that refuses a mapping key given twice (:class:`DuplicateKeyError`,
    a ``yaml.YAMLError`` whose mark is the second key's line): ``yaml.load(text,
    Loader=UniqueKeyLoader)``. Keys are compared as loaded (``1`` and ``1.0`` clash, as in a
    dict); the keys a ``<<`` merge brings in may be overridden, as YAML intends."""

    def get_single_node(self) -> Any:
        node = super().get_single_node()
        if node is not None:
            self._check_keys(node, (), set())
        return node

    def _check_keys(self, node: yaml.Node, path: tuple[str, ...], seen: set[int]) -> None:
        if id(node) in seen:  # an alias met again (or a recursive document)
            return
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._check_keys(item, (*path, str(i)), seen)
        elif isinstance(node, yaml.MappingNode):
            marks: dict[Any, yaml.Mark] = {}
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                    self._check_keys(value_node, path, seen)
                    continue
                key, named = self.construct_object(key_node), (*path, str(key_node.value))
                if key in marks:  # named as written there (1.0 after 1)
                    raise DuplicateKeyError(".".join(named), marks[key], key_node.start_mark)
                marks[key] = key_node.start_mark
                self._check_keys(value_node, named, seen)


def load_yaml(text: str, file: str) -> Any:
    """``text`` (the content of ``file``) as YAML; a syntax error or a key given twice in a
    mapping is a ``SpecError`` naming the file, the line and (for a duplicate) the key."""
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # a safe loader (CSafeLoader)
    except DuplicateKeyError as exc:
        first, again = exc.lines
        raise SpecError(f"given twice, at lines {first} and {again}: YAML would silently keep "
                        f"only the last; give each key once", file=file, key=exc.key) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(f"not valid YAML{where}: {problem}", file=file) from None
