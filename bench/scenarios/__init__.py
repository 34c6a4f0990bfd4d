"""The scenarios: one module each, run by ``python -m bench NAME`` (see bench/__init__.py)."""
