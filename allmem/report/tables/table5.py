"""Table 5: the benchmarks' statistics, counted from the loaders (what the runs read, not the papers' numbers).

Per dataset: dialogues (LoCoMo conversations, LongMemEval haystacks: one per question), sessions, turns, tokens
per turn and per history (``allmem.tokens.count_tokens``, o200k_base, over the turn text; LoCoMo's image
captions are counted apart), questions per category or type, and evidence turns per question (the ids each
question lists; an id matching no turn is counted apart, as ``metrics.json`` ``inputs`` does).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from allmem import files
from allmem.paths import DATASETS, config_dir, resolve_data_path
from allmem.tokens import count_tokens

LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


@dataclass(frozen=True)
class Row:
    section: str
    statistic: str
    value: float | int


def compute(dialogues: Sequence, dataset: str) -> list[Row]:
    """The statistics of ``dialogues`` (``allmem.types.Dialogue``s as a loader returns them), in table order."""
    turns = [t for d in dialogues for s in d.sessions for t in s.turns]
    turn_tokens = [count_tokens(t.text) for t in turns]
    by_dialogue: dict[str, int] = Counter()
    for d in dialogues:
        by_dialogue[d.id] = sum(count_tokens(t.text) for s in d.sessions for t in s.turns)
    questions = [q for d in dialogues for q in d.questions]
    ids = {d.id: {t.id for s in d.sessions for t in s.turns} for d in dialogues}
    ev = [len(q.evidence) for q in questions]
    unmatched = sum(1 for q in questions for e in q.evidence if e not in ids.get(q.dialogue_id, set()))
    n_d = len(dialogues)
    unit = "haystacks" if dataset.startswith("longmemeval") else "conversations"
    rows = [
        Row("size", unit, n_d),
        Row("size", "sessions", sum(len(d.sessions) for d in dialogues)),
        Row("size", "sessions per dialogue (mean)", sum(len(d.sessions) for d in dialogues) / max(1, n_d)),
        Row("size", "turns", len(turns)),
        Row("size", "turns per dialogue (mean)", len(turns) / max(1, n_d)),
        Row("size", "turns with an image caption", sum(1 for t in turns if t.caption)),
        Row("tokens", "tokens per turn (mean)", sum(turn_tokens) / max(1, len(turns))),
        Row("tokens", "tokens per history (mean)", sum(by_dialogue.values()) / max(1, n_d)),
        Row("tokens", "tokens per history (max)", max(by_dialogue.values(), default=0)),
        Row("tokens", "tokens, all histories", sum(by_dialogue.values())),
        Row("questions", "questions", len(questions)),
    ]
    if any(q.category is not None for q in questions):
        cats = Counter(q.category for q in questions)
        rows += [Row("questions", f"category {c} ({LOCOMO_CATEGORIES.get(c, '?')})", n)
                 for c, n in sorted(cats.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))]  # fmt: skip
    types = Counter(q.question_type for q in questions if q.question_type)
    rows += [Row("questions", f"type {t}", n) for t, n in sorted(types.items())]
    rows += [
        Row("evidence", "evidence turns per question (mean)", sum(ev) / max(1, len(ev))),
        Row("evidence", "questions without evidence", sum(1 for n in ev if n == 0)),
        Row("evidence", "evidence ids matching no turn", unmatched),
    ]
    return rows


def load(dataset: str, path: str | None = None) -> tuple[list, Path]:
    """A dataset's dialogues through ``benchmarks.load_dataset`` and its own config (no limits), and its file."""
    from benchmarks import load_dataset

    node = OmegaConf.load(config_dir() / "dataset" / f"{dataset}.yaml")
    node.path = path
    node.limit_dialogues = node.limit_sessions = node.limit_questions = None
    return load_dataset(node), resolve_data_path(dataset, path)


def frame(sections: dict[str, list[Row]]) -> pd.DataFrame:
    return pd.DataFrame(
        [{"dataset": ds, "section": r.section, "statistic": r.statistic, "value": r.value}
         for ds, rows in sections.items() for r in rows]
    )  # fmt: skip


def _fmt(v: float | int) -> str:
    return f"{v:,}" if isinstance(v, int) else f"{v:,.1f}"


def markdown(sections: dict[str, list[Row]], sources: dict[str, Path], notes: Sequence[str] = ()) -> str:
    out = ["# Table 5: dataset statistics"]
    for ds, rows in sections.items():
        title = DATASETS[ds].title if ds in DATASETS else ds
        out += [f"## {title}", "| statistic | value |", "|---|---:|"]
        out += [f"| {r.statistic} | {_fmt(r.value)} |" for r in rows]
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    data = "; ".join(f"{DATASETS[ds].title if ds in DATASETS else ds}: {p.name} sha256:"
                     f"{files.sha256_file(p)[:12] if p.is_file() else 'folder'}" for ds, p in sources.items())  # fmt: skip
    footer = [
        f"*Made by `allmem report table5` on {now} from the loaders (no runs): {data}. Tokens: o200k_base "
        "(allmem.tokens) over each turn's text; image captions are not counted. A history is one dialogue's turns "
        "(a LongMemEval haystack). Evidence: the turn ids each question lists.*",
        *[f"*{n}*" for n in notes if n],
    ]
    return "\n".join(out) + "\n\n" + "\n\n".join(footer) + "\n"


def render(tables: Path, lme: str | None, skipped: str) -> list[Path]:
    """Write ``table5.md`` and ``table5.csv`` under ``tables`` (LoCoMo, and LongMemEval-s when ``lme`` is given)."""
    sections: dict[str, list[Row]] = {}
    sources: dict[str, Path] = {}
    for ds, path in (("locomo", None), ("longmemeval_s", lme)):
        if ds == "longmemeval_s" and not lme:
            continue
        dialogues, sources[ds] = load(ds, path)
        sections[ds] = compute(dialogues, ds)
    tables.mkdir(parents=True, exist_ok=True)
    md, csv = tables / "table5.md", tables / "table5.csv"
    files.write_atomic(md, markdown(sections, sources, [] if lme else [skipped + "."]))
    files.write_atomic(csv, frame(sections).to_csv(index=False))
    return [md, csv]
