"""Reading YAML for a config: a file, an override's value, a preset, each within bounds that keep it plain data.

What this module owns: ``load_yaml(text)``, the one YAML reader of the config layer (the loader, ``--set`` values and
the presets all read through it), and ``YamlProblems``, the error it raises. docs/configuration.md, "What a YAML
file may hold", is the user's side of these rules.

Rules it keeps, over PyYAML's safe loader:
- **plain data only**: null, booleans, integers, floats, strings, lists and mappings. A date such as ``2024-05-01``
  is read as the text it is (YAML 1.2's core schema has no timestamps); an explicit ``!!binary``, ``!!set``,
  ``!!omap``, ``!!pairs`` or ``!!timestamp`` value is refused, since lock.json, which records the config, is JSON;
- **no duplicate keys**: a key written twice in one mapping is refused, naming its dotted path and both lines
  (PyYAML would keep the last silently); a merge key (``<<: *base``) may still be overridden by the mapping's own.
  ``read_yaml`` reports them beside the data, with the last value kept (as platoon 0.4.0 validates it), so that a
  file's other problems join the same report; ``load_yaml`` raises them;
- **bounded**: nesting deeper than ``MAX_DEPTH`` levels is refused while the document is composed (no
  RecursionError), aliases may expand to at most ``MAX_ALIAS_VALUES`` values beyond the document's own (an alias
  bomb validates quickly and then takes gigabytes to print or copy), an alias inside its own anchor is refused,
  and an integer may have at most ``MAX_INT_DIGITS`` digits (Python refuses to read past 4,300).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_DEPTH = 64
"""Levels of nesting a document may have (a config needs a handful; ``service_kwargs`` a few more)."""

MAX_ALIAS_VALUES = 100_000
"""Values that aliases may add to a document beyond the ones it writes out."""

MAX_INT_DIGITS = 100
"""Digits an integer may have (a 64-bit one has at most 19)."""

_MERGE = "tag:yaml.org,2002:merge"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_NOT_PLAIN = {
    "tag:yaml.org,2002:binary": "binary data",
    "tag:yaml.org,2002:set": "a set",
    "tag:yaml.org,2002:omap": "an ordered map",
    "tag:yaml.org,2002:pairs": "a list of pairs",
    _TIMESTAMP: "a timestamp",
}


class YamlProblem(NamedTuple):
    """One problem of a YAML text: the dotted path it is at ('' when it has none) and what is wrong there."""

    path: str
    message: str


class YamlProblems(yaml.YAMLError):
    """A YAML text that is not a config's plain data; ``problems`` holds every problem found."""

    def __init__(self, problems: list[YamlProblem]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{p.path}: {p.message}" if p.path else p.message for p in problems))


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""


class _ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader with the rules of the module docstring."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self.duplicates: list[YamlProblem] = []
        """The duplicate keys of the document, in the order of their lines (its data keeps each one's last value)."""

    def compose_node(self, parent: Node | None, index: Any) -> Node:  # type: ignore[override]
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise YamlProblems([YamlProblem("", f"{_where(mark)}nested more than {MAX_DEPTH} levels deep")])
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_document(self, node: Node) -> Any:
        self.duplicates = _check_graph(self, node)
        return super().construct_document(node)

    def construct_yaml_int(self, node: ScalarNode) -> int:
        digits = sum(c.isalnum() for c in str(node.value))
        if digits > MAX_INT_DIGITS:
            raise ConstructorError(None, None, f"an integer of {digits} digits; at most {MAX_INT_DIGITS} are read",
                                   node.start_mark)
        return super().construct_yaml_int(node)

    def construct_not_plain(self, node: Node) -> Any:
        what = _NOT_PLAIN.get(node.tag, node.tag)
        raise ConstructorError(None, None, f"{what} is not a config value: write it as text, a list or a mapping",
                               node.start_mark)


_ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_ConfigLoader.add_constructor("tag:yaml.org,2002:int", _ConfigLoader.construct_yaml_int)
for _tag in _NOT_PLAIN:
    _ConfigLoader.add_constructor(_tag, _ConfigLoader.construct_not_plain)


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_graph(loader: _ConfigLoader, root: Node) -> list[YamlProblem]:
    """Refuse a recursive alias and aliases that expand past ``MAX_ALIAS_VALUES``; return the duplicate keys (every
    one of them, each with its path and lines, by line). Iterative: the graph may be as deep as ``MAX_DEPTH``, and
    wide."""
    # Expanded size of every node, post-order, shared nodes counted once per reference (memoized by id).
    size: dict[int, int] = {}
    visiting: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            visiting.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in _children(node))
            continue
        if key in size:
            continue
        if key in visiting:
            raise YamlProblems([YamlProblem("", f"{_where(node.start_mark)}an alias refers to a value that holds "
                                                "it (a recursive alias)")])
        visiting.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)
    extra = size[id(root)] - len(size)
    if extra > MAX_ALIAS_VALUES:
        raise YamlProblems([YamlProblem("", f"aliases expand to {extra} values beyond the document's own "
                                            f"{len(size)}; at most {MAX_ALIAS_VALUES} are expanded")])
    problems: list[tuple[int, YamlProblem]] = []
    seen: set[int] = set()
    walk: list[tuple[Node, tuple[str, ...]]] = [(root, ())]
    while walk:
        node, path = walk.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, SequenceNode):
            walk.extend((child, (*path, str(i))) for i, child in enumerate(node.value))
        elif isinstance(node, MappingNode):
            first: dict[Any, int] = {}
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE or not isinstance(key_node, ScalarNode):
                    continue
                try:
                    key = loader.construct_object(key_node)
                    hash(key)
                except (yaml.YAMLError, TypeError):
                    continue  # construction reports it, with its line
                line = key_node.start_mark.line + 1
                where = ".".join((*path, str(key)))
                if key in first:
                    problems.append((line, YamlProblem(where, f"duplicate key, on lines {first[key]} and {line}; "
                                                              "a key may appear once in a mapping")))
                else:
                    first[key] = line
                walk.append((value_node, (*path, str(key))))
    return [p for _, p in sorted(problems, key=lambda lp: lp[0])]


def read_yaml(text: str) -> tuple[Any, list[YamlProblem]]:
    """The plain data of the YAML document ``text`` (None for an empty one), each duplicate key at its last value,
    and the duplicate keys as problems (empty: none).

    Raises ``YamlProblems`` for the rest of what the module docstring refuses (the duplicate keys first, when there
    are any) and ``yaml.YAMLError`` for a syntax error; never RecursionError or a ValueError of Python's own.
    """
    loader = _ConfigLoader(text)
    try:
        return loader.get_single_data(), loader.duplicates
    except yaml.YAMLError as exc:
        if loader.duplicates:
            raise YamlProblems([*loader.duplicates, *describe_yaml_error(exc)]) from exc
        raise
    finally:
        loader.dispose()


def load_yaml(text: str) -> Any:
    """The plain data of the YAML document ``text`` (None for an empty one).

    Raises ``YamlProblems`` for what the module docstring refuses (duplicate keys included) and ``yaml.YAMLError``
    for a syntax error; never RecursionError or a ValueError of Python's own.
    """
    data, duplicates = read_yaml(text)
    if duplicates:
        raise YamlProblems(duplicates)
    return data


def nesting_depth(data: Any) -> int:
    """How deeply lists and mappings nest in ``data`` (a scalar: 0), counted without recursion."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = list(node.values())
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def describe_yaml_error(exc: yaml.YAMLError) -> list[YamlProblem]:
    """The problems of a YAML error: a ``YamlProblems``' own, else one with the error's line and column."""
    if isinstance(exc, YamlProblems):
        return list(exc.problems)
    mark = getattr(exc, "problem_mark", None)
    what = getattr(exc, "problem", None) or str(exc)
    return [YamlProblem("", f"{_where(mark)}{what}")]


__all__ = ["MAX_ALIAS_VALUES", "MAX_DEPTH", "MAX_INT_DIGITS", "YamlProblem", "YamlProblems", "describe_yaml_error",
           "load_yaml", "nesting_depth", "read_yaml"]
