"""The search spaces shipped with autotune (YAML files; schema in README.md)."""
