"""The bounded safe YAML loader every YAML the program reads goes through: a config, a run directory's config.yaml,
an experiment.yaml. Safe (no python tags), at most MAX_YAML_DEPTH levels deep and MAX_YAML_NODES values once aliases
are expanded (an alias bomb is a few lines that expand to billions); a failure is one ConfigError naming the file.

Here, beside the run directory's files, not in config.py, so `wpultr status` reads a run's name without loading the
config's imports (tests/test_startup.py)."""
from __future__ import annotations

from typing import Any

import yaml

from ..errors import ConfigError, cut

MAX_YAML_NODES = 100_000               # values once every alias is expanded
MAX_YAML_DEPTH = 64                    # nested sequences and mappings


class _BoundedLoader(yaml.SafeLoader):
    """The safe loader, refusing a document nested deeper than MAX_YAML_DEPTH or holding more than MAX_YAML_NODES
    values once its aliases are expanded (an alias bomb is a few lines that expand to billions)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._sizes: dict[int, int] = {}      # id(node) -> values under it, aliases expanded (node composed)

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            anchored = self.anchors.get(self.peek_event().anchor)
            if anchored is not None and id(anchored) not in self._sizes:
                raise ConfigError("an alias (*name) inside the value it names; a config holds no loops")
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise ConfigError(f"nested more than {MAX_YAML_DEPTH} levels deep; a config is a few levels of "
                                  f"sections and values")
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if id(node) not in self._sizes:   # children were composed (and sized) first; an alias's node was sized once
            children = node.value if isinstance(node, yaml.SequenceNode) else \
                [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else []
            self._sizes[id(node)] = 1 + sum(self._sizes[id(c)] for c in children)
        if self._sizes[id(node)] > MAX_YAML_NODES:
            raise ConfigError(f"more than {MAX_YAML_NODES} values once its aliases (*name) are expanded")
        return node


def safe_yaml(text: str, where: str) -> Any:
    """`text` parsed by the safe loader within MAX_YAML_DEPTH and MAX_YAML_NODES; one-line ConfigError naming
    `where` (a file, or `--set KEY`) otherwise."""
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: not valid YAML: {cut(' '.join(str(e).split()))}") from None
    finally:
        loader.dispose()
