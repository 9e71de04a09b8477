"""``allmem report DIR``: the results tables, read only from the complete run directories under DIR."""

from __future__ import annotations

import argparse
from pathlib import Path

from allmem.report.atc import atc_sections
from allmem.report.tables import find_runs, group_table, main_table, split_table


def build_report(root: Path) -> str:
    runs = find_runs(root)
    if not runs:
        raise SystemExit(f"allmem report: no complete run directory (with DONE) under {root}")
    sections = []
    for dataset in sorted({r.dataset for r in runs}):
        subset = [r for r in runs if r.dataset == dataset]
        offline = all(r.offline for r in subset)
        label = " (offline backend: extractive answers, no LLM judge)" if offline else ""
        sections.append(f"## {dataset}{label}\n\n{main_table(subset)}")
        sections.append(
            f"### F1 per {'category' if dataset == 'locomo' else 'question type'}\n\n{group_table(subset)}"
        )
        if dataset == "locomo":
            sections.append(
                "### Fitted vs held-out conversations\n\nAny threshold fitted on LoCoMo was fitted on conv-26, 30, "
                f"41, 42, 43 only.\n\n{split_table(subset)}"
            )
        sections += atc_sections(subset)
    return "\n\n".join(sections) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="allmem report", description=__doc__)
    parser.add_argument("root", type=Path, help="folder holding run directories (searched recursively)")
    parser.add_argument("--out", type=Path, help="also write the Markdown here")
    parser.add_argument("--figures", type=Path, help="also draw the figures (PNG) into this folder")
    args = parser.parse_args(argv)
    text = build_report(args.root)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    if args.figures:
        from allmem.report.figures import write_figures

        for path in write_figures(find_runs(args.root), args.figures):
            print(f"[allmem] figure: {path}")
    return 0
