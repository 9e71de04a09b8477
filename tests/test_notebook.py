"""notebooks/analysis.ipynb runs top to bottom (nbclient) on a small results folder made by the summarise step."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from report_fixture import write_experiment

from allmem.report.paper import summarise

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "analysis.ipynb"


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    for exp in ("table1", "fig4_theta", "fig5"):
        write_experiment(root, exp, lambda label, i: (len(label) + i) % 2 == 0)
    out = tmp_path_factory.mktemp("results")
    summarise(["table1", "table2", "table3", "fig4", "fig5", "fig6"], root, out)
    return out


def _outputs(nb, kind: str) -> list[str]:
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                texts.append(out.get("text", ""))
            for mime, value in (out.get("data") or {}).items():
                if mime == kind:
                    texts.append(value if isinstance(value, str) else "")
    return texts


@pytest.mark.slow
def test_notebook_runs_on_a_small_results_folder(results, monkeypatch):
    monkeypatch.setenv("ALLMEM_RESULTS", str(results))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert not any(cell.get("outputs") for cell in nb.cells if cell.cell_type == "code"), (
        "commit it without outputs"
    )
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    ).execute()
    html = "\n".join(_outputs(nb, "text/html"))
    assert "allmem" in html and "bm25" in html  # Table 1 rows
    plain = "\n".join(_outputs(nb, "text/plain") + _outputs(nb, "stream"))
    assert "runs" in plain and "table1.csv" in plain
    images = _outputs(nb, "image/png")
    assert len(images) >= 4  # fig4, fig5, fig6 redrawn, plus the saved figures shown
    assert "fig3.csv not found" in "\n".join(
        _outputs(nb, "text/markdown")
    )  # fig3 was not summarised: said so
