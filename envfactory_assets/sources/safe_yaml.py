"""YAML for untrusted files (user resources, ``curation.yaml``): the safe loader plus two limits.

PyYAML's ``safe_load`` already refuses tags such as ``!!python/object``, but it still accepts

- alias expansion bombs ("billion laughs"): a few lines of anchors and aliases describe a document of
  billions of nodes; PyYAML shares the nodes, but anything that walks the result (JSON Schema validation,
  error messages that print the value, JSON encoding) expands them and hangs;
- repeated mapping keys, where the last value silently wins.

:func:`load_untrusted_yaml` composes the node graph first, counts the nodes the document has *with
aliases expanded* (memoized over the shared nodes, so counting is linear in the file), and refuses a
document over :data:`MAX_EXPANDED_NODES`, a recursive alias, or a repeated key. Only then are the Python
objects built. Anchors and aliases within the limit keep working (real OpenAPI YAML uses them).
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_EXPANDED_NODES = 2_000_000
"""Most nodes (scalars, sequences, mappings) a document may have once aliases are expanded."""


class UnsafeYamlError(yaml.YAMLError):
    """A YAML document that is too large once aliases are expanded, aliases itself, or repeats a key."""


def _where(node: yaml.Node) -> str:
    return f"line {node.start_mark.line + 1}, column {node.start_mark.column + 1}"


def _expanded_size(root: yaml.Node, limit: int) -> int:
    """Node count of ``root`` with every alias expanded; raises :class:`UnsafeYamlError` past ``limit``."""
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes and not children_done:
            continue
        if isinstance(node, yaml.ScalarNode):
            sizes[key] = 1
            continue
        children = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else list(node.value)
        if children_done:
            in_progress.discard(key)
            total = 1 + sum(sizes[id(c)] for c in children)
            if total > limit:
                raise UnsafeYamlError(
                    f"more than {limit:,} nodes once aliases are expanded "
                    f"(an alias expansion bomb?), near {_where(node)}"
                )
            sizes[key] = total
            continue
        if key in in_progress:
            raise UnsafeYamlError(f"a recursive alias, near {_where(node)}")
        in_progress.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in in_progress:
                raise UnsafeYamlError(f"a recursive alias, near {_where(child)}")
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def _check_unique_keys(root: yaml.Node) -> None:
    seen_nodes: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes or isinstance(node, yaml.ScalarNode):
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: set[Any] = set()
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                    marker = (key_node.tag, key_node.value)
                    if marker in keys:
                        raise UnsafeYamlError(
                            f"key {key_node.value[:80]!r} appears twice in one mapping, near {_where(key_node)}"
                        )
                    keys.add(marker)
                stack += [key_node, value_node]
        else:
            stack += list(node.value)


def load_untrusted_yaml(text: str | bytes, max_nodes: int = MAX_EXPANDED_NODES) -> Any:
    """Parse one YAML document with the safe loader, after checking its expanded size and its keys.

    Args:
        text: the document (``bytes`` are decoded by PyYAML: UTF-8/16 with or without BOM).
        max_nodes: the most nodes the document may have with aliases expanded.

    Returns:
        The Python value (``None`` for an empty document).

    Raises:
        UnsafeYamlError: too many expanded nodes, a recursive alias, or a repeated mapping key.
        yaml.YAMLError: anything the safe loader refuses (syntax, unknown tags such as ``!!python/object``,
            several documents in one stream).
    """
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, max_nodes)
        _check_unique_keys(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()
