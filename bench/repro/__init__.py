"""Reproductions of broker behaviour that the documentation cites (evidence, not tests)."""
