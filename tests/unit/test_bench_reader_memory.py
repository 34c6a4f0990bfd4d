"""The reader_memory scenario measures both ledger variants step by step in fresh processes
(it backs docs/benchmarks.md's reader-memory section, so it must keep running)."""

from __future__ import annotations

from bench.harness.docs import with_markers
from bench.scenarios.reader_memory import SECTION, VARIANTS, measure, render


def test_both_variants_measure_every_step_and_the_section_names_them() -> None:
    results = measure(commits=4)

    assert set(results) == set(VARIANTS)
    for variant, steps in results.items():
        names = [s["step"] for s in steps]
        assert names[:3] == ["python", "runner", "+ spark_groups"], variant
        assert names[-1] == "+ 4 commits and reads", variant
        total = {s["step"]: s["anonymous"] + s["file"] for s in steps}
        # Loading Spark's runner and then a Delta writer each take memory; nothing is free.
        assert total["runner"] > total["python"] > 0, variant
        assert total["+ first commit"] > total["+ spark_groups"], variant
        assert steps[-1]["deltalake_lib"] > 0, variant  # delta-rs' library was loaded
        assert steps[-1]["commit_p50_ms"] > 0, variant
    found = {"variants": results, "commits": 4, "command": "test", "when": "today"}
    text = with_markers(SECTION, render(found))
    assert text.startswith("<!-- reader-memory:start -->")
    assert "| + first commit |" in text and text.endswith("<!-- reader-memory:end -->")
