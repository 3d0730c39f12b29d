"""Every config section's own dataclass, validated when built, and the method names; `wpultr.config` composes them."""
