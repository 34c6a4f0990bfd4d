"""The notebooks cannot rot: the Jupyter one runs end to end, the Databricks one compiles."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def test_the_jupyter_notebook_runs_end_to_end(tmp_path: Path, monkeypatch) -> None:
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(NOTEBOOKS / "quickstart.ipynb", as_version=4)
    # Its own embedded broker, whatever the test run uses; this checkout's spark_groups
    # (the kernel inherits PYTHONPATH).
    monkeypatch.delenv("BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    client = NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    )
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on failure
    nbformat.write(notebook, tmp_path / "executed.ipynb")
    outputs = "".join(
        out.get("text", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
    )
    assert "produced 300 orders" in outputs
    assert "group state:" in outputs and '"assigned_partitions": 3' in outputs


def test_the_databricks_notebook_is_a_python_source_notebook() -> None:
    source = (NOTEBOOKS / "databricks_pipeline.py").read_text()
    assert source.startswith("# Databricks notebook source\n")
    assert source.count("# COMMAND ----------") >= 5
    ast.parse(source)
