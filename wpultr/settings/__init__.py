"""The run config's sections, each a dataclass validated when built, torch-free and below `wpultr.config`."""
