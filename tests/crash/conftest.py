"""The crash-point matrix reuses the helpers of tests/integration (topics, group settings)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
