"""HippoRAG 2 (Gutiérrez et al. 2025, arXiv 2502.14802), OSU-NLP-Group/HippoRAG @c617143 (``HippoRAG.py``).

Index (``index``): OpenIE on every new passage, a named-entity call (``hipporag_ner``) then an entity-conditioned
triple call (``hipporag_triples``); triples are lowercased and stripped to alphanumerics; their subjects and
objects are the phrase nodes. The graph is undirected over phrase and passage nodes with three edge kinds, built
as upstream builds them from its ``node_to_node_stats`` map (one undirected edge per directed key, so a
subject-object pair gives two parallel edges):
- subject–object: weight = number of triples joining them (both directions);
- passage–phrase: weight 1 for each phrase of the passage's triples;
- synonym: phrase pairs with embedding cosine ≥ ``synonym_threshold`` (0.8), only for phrases with more than 2
  alphanumeric characters, scanning each phrase's neighbours best first and stopping after ``synonym_max`` (100)
  more; weight = the cosine (it overwrites a subject–object weight of the same pair, as upstream).
Passages, phrases and facts (``str`` of the triple tuple) are embedded separately.

Retrieval (``retrieve``): facts are scored by min-max normalised cosine to the question; the top
``linking_top_k`` (5) go to the recognition-memory filter (``hipporag_filter``, phase ``retrieve``), which
returns a subset. An empty subset (or a failed call) falls back to dense passage retrieval. Otherwise each kept
fact's subject and object get the fact's score divided by the number of passages containing that phrase,
averaged per phrase (HippoRAG#128), and only the top ``linking_top_k`` phrases are kept; every passage gets its
min-max dense score × ``passage_node_weight`` (0.05); Personalized PageRank (python-igraph, prpack, damping
0.5, edge weights) over that reset vector ranks the passages by PPR mass. The top ``retrieval_top_k`` (200)
passages are returned, scored by PPR mass (or by the dense score on fallback).

LoCoMo protocol: none upstream. One passage per turn, shown to OpenIE as ``[date] Speaker: text [image: ...]``;
indexing runs at the end of each session on that session's new passages only. Passage nodes are keyed by turn
id (upstream: the md5 of the text), so identical utterances stay apart and every passage maps to its turn
(HippoRAG#77: results are texts upstream). The passage embedding is of ``Speaker: text [image: ...]``, the string
every turn-level method embeds, so the shared cache serves it.

Simplified, and why:
- The graph is built once after ingestion (and again only if more passages arrive), from all passages at once,
  as upstream's ``index`` builds it on a fresh store. Upstream indexing session by session would not give the
  same graph: its ``index`` extends the saved graph (``augment_graph``, ``add_new_edges``) rather than rebuilding
  it, so edge weights and synonym edges depend on the order passages arrived in. The size of that difference on
  LoCoMo has not been measured.
- Not simplified, for the record: each fact of the filter's reply is mapped to the closest candidate by difflib's ratio, as upstream
  (``closest_candidate``; ``filter_match_cutoff``, upstream 0.0, so a paraphrase still selects its candidate); a
  reply fact that is not a list or string is skipped and counted (``skipped_unknown_fact``).
- Embeddings: all-MiniLM-L6-v2 without query instructions (the paper used NV-Embed-v2); LLM: whatever
  ``llm=`` names (the paper used Llama-3.3-70B).
- A reset vector that sums to zero (only possible for a one-passage memory) becomes uniform instead of
  tripping upstream's assertion.

Offline roles (``HippoRAGResponder``, constants fitted on the fit conversations by ``scripts/fit_baselines.py``):
NER gives the speaker, the names, YAKE keyphrases, dates and numbers of the turn (``allmem.text.keywords``).
Triples are made sentence by sentence, so a fact joins what one sentence says: the subject is the speaker when the
sentence is in the first person (or names one entity only), else its first entity; the relation is the
sentence's first ``relation_words`` content words outside the entities; one triple goes to each of the
sentence's first ``max_entities`` other entities, and consecutive objects are joined by the same relation.
The recognition filter keeps the candidate facts sharing at least ``filter_min_overlap`` stemmed content words with the
question, the speakers' names aside; when none does, retrieval falls back to dense passages, as upstream does on
an empty filter reply. (Until issue 22 every triple hung off the speaker and the filter kept every candidate, so
the graph seeded the speaker's node on every question and added nothing over dense retrieval.)
"""

from __future__ import annotations

import difflib
import json
import re
import time
from datetime import datetime
from functools import lru_cache
from typing import Any

import igraph as ig
import numpy as np

from allmem.errors import LLMError
from allmem.llm.base import ChatRequest
from allmem.systems import MemorySystem, Resources
from allmem.text import index_terms
from allmem.threads import single_thread_blas, single_thread_openmp
from allmem.types import RetrievalResult, SessionInfo, Turn, format_date

from ._common import (
    Tally,
    ask,
    ask_many,
    content_terms,
    embedder_of,
    keywords,
    llm_of,
    min_max,
    names,
    phrases,
    sentences,
    unique,
)
from ._turns import turn_unit

Triple = tuple[str, str, str]
_NON_ALNUM = re.compile(r"[^a-z0-9 ]")


def closest_candidate(fact: Any, candidates: list[Triple], cutoff: float) -> int | None:
    """Index of the candidate closest to one fact of the filter's reply, as upstream's ``DSPyFilter`` maps it
    (``difflib.get_close_matches(..., n=1)``): both sides normalised and joined with spaces, similarity =
    ``difflib.SequenceMatcher.ratio``, the best candidate kept if its ratio is at least ``cutoff`` (upstream 0.0:
    every reply fact maps to some candidate); ties go to the higher-ranked candidate. A fact that is neither a
    list nor a string, or an empty one, gives ``None``."""
    if isinstance(fact, (list, tuple)):
        text = " ".join(normalise(x) for x in fact).strip()
    elif isinstance(fact, str):
        text = normalise(fact)
    else:
        return None
    if not text or not candidates:
        return None
    ratios = [difflib.SequenceMatcher(None, text, " ".join(c)).ratio() for c in candidates]
    best = max(range(len(ratios)), key=lambda i: (ratios[i], -i))
    return best if ratios[best] >= cutoff else None


def normalise(text: Any) -> str:
    """HippoRAG's ``text_processing``: lowercase, every non-alphanumeric character a space, spaces collapsed."""
    return " ".join(_NON_ALNUM.sub(" ", str(text).lower()).split())


# ---------------------------------------------------------------- offline roles


_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|i'd|i'll|me|my|mine|myself|we|our|us)\b", re.I)


@lru_cache(maxsize=1 << 14)
def _word_re(entity: str) -> re.Pattern[str]:
    """The entity as whole words, case-insensitive (``low`` is lowercased already)."""
    return re.compile(r"(?<!\w)" + re.escape(entity.lower()) + r"(?!\w)")


class HippoRAGResponder:
    """Offline answers to the three HippoRAG 2 prompts (rules in the module docstring)."""

    def __init__(self, max_entities: int, relation_words: int, filter_min_overlap: int) -> None:
        self.max_entities, self.relation_words = max_entities, relation_words
        self.filter_min_overlap = filter_min_overlap

    def offline_reply(self, req: ChatRequest) -> str:
        v = req.variables
        if req.template == "hipporag_ner":
            text, speaker = v["text"], v["speaker"]
            ents = unique([speaker, *names(text), *phrases(text), *keywords(text, [speaker])])
            return json.dumps({"named_entities": ents}, ensure_ascii=False)
        if req.template == "hipporag_triples":
            return json.dumps(
                {"triples": self.triples(v["text"], v["speaker"], v["entity_list"])}, ensure_ascii=False
            )
        if req.template == "hipporag_filter":
            return json.dumps(
                {"fact": self.recognise(v["question"], v["candidates"], v["speakers"])}, ensure_ascii=False
            )
        raise LLMError(f"HippoRAGResponder: no offline role for template {req.template!r}")

    def triples(self, text: str, speaker: str, entities: list[str]) -> list[list[str]]:
        """Per sentence: its subject (the speaker when it speaks in the first person, else its first entity, else
        the speaker), a relation of the sentence's first ``relation_words`` content words outside every entity
        ("mentions" when none), and one triple to each of its first ``max_entities`` other entities, in the order
        they occur; consecutive objects are joined by the same relation. Entities found in no sentence (a caption's,
        a changed spelling) hang off the speaker with "mentions", within the same cap."""
        others = [e for e in entities if e.lower() != speaker.lower()]
        out: list[list[str]] = []
        placed: set[str] = set()
        n_objects = 0
        for sent in sentences(text) or [text]:
            low = sent.lower()
            at = [(m.start(), i, e) for i, e in enumerate(others) if (m := _word_re(e).search(low))]
            found = sorted(at)
            ents = [e for _, _, e in found]
            ents = [e for e in ents if not any(e.lower() in f.lower() and len(f) > len(e) for f in ents)]
            if not ents:
                continue
            subject = speaker if _FIRST_PERSON.search(sent) or len(ents) == 1 else ents[0]
            objects = [e for e in ents if e != subject][: self.max_entities]
            inside = {w for e in [speaker, *ents] for w in content_terms(e)}
            relation = " ".join([w for w in content_terms(sent) if w not in inside][: self.relation_words])
            relation = relation or "mentions"
            out += [[subject, relation, o] for o in objects]
            out += [[a, relation, b] for a, b in zip(objects, objects[1:], strict=False)]
            placed.update(e.lower() for e in [subject, *objects])
            n_objects += len(objects)
        rest = [e for e in others if e.lower() not in placed][: max(0, self.max_entities - n_objects)]
        return out + [[speaker, "mentions", e] for e in rest]

    def recognise(self, question: str, candidates: list[list[str]], speakers: list[str]) -> list[list[str]]:
        """The candidates sharing at least ``filter_min_overlap`` stemmed content words with the question, the speakers'
        names aside (every fact of a speaker shares the name; 0 keeps every candidate), in the order given."""
        known = {w for s in speakers for w in index_terms(s)}
        asked = set(index_terms(question)) - known
        return [
            c
            for c in candidates
            if len(asked & set(index_terms(" ".join(map(str, c))))) >= self.filter_min_overlap
        ]


# ---------------------------------------------------------------- the system


class HippoRAG2(MemorySystem):
    name = "hipporag"
    search_kind = "dense+graph"
    depth_attrs = ("retrieval_top_k",)  # equal context: the passages returned by PPR mass

    def __init__(
        self,
        linking_top_k: int = 5,
        passage_node_weight: float = 0.05,
        damping: float = 0.5,
        synonym_threshold: float = 0.8,
        synonym_max: int = 100,
        retrieval_top_k: int | None = 200,
        max_entities: int = 12,
        relation_words: int = 8,
        filter_min_overlap: int = 1,
        filter_match_cutoff: float = 0.0,
        resources: Resources | None = None,
    ) -> None:
        super().__init__(resources)
        if not 0 <= filter_match_cutoff <= 1:
            raise ValueError(
                f"configs/method/hipporag.yaml: filter_match_cutoff must be in [0, 1], got {filter_match_cutoff}"
            )
        self.filter_match_cutoff = filter_match_cutoff
        if linking_top_k < 1 or synonym_max < 0 or (retrieval_top_k is not None and retrieval_top_k < 1):
            raise ValueError("configs/method/hipporag.yaml: linking_top_k and retrieval_top_k must be >= 1")
        if max_entities < 1 or relation_words < 0 or filter_min_overlap < 0:
            raise ValueError(
                "configs/method/hipporag.yaml: need max_entities >= 1, relation_words >= 0, filter_min_overlap >= 0"
            )
        if not 0 < damping < 1:
            raise ValueError(f"configs/method/hipporag.yaml: damping must be in (0, 1), got {damping}")
        self.linking_top_k, self.passage_node_weight, self.damping = (
            linking_top_k,
            passage_node_weight,
            damping,
        )
        self.synonym_threshold, self.synonym_max = synonym_threshold, synonym_max
        self.retrieval_top_k = retrieval_top_k
        self.responder = HippoRAGResponder(max_entities, relation_words, filter_min_overlap)
        self.embedder = embedder_of(self.resources, "hipporag")
        self.llm = llm_of(self.resources)
        self.reset("")

    def reset(self, dialogue_id: str) -> None:
        self.dialogue_id = dialogue_id
        self.passages: list[Turn] = []
        self.triples: list[list[Triple]] = []  # per passage, normalised
        self.pending: list[Turn] = []
        self.graph: ig.Graph | None = None
        self.tally = Tally()

    def ingest(self, turn: Turn) -> None:
        self.pending.append(turn)

    def end_session(self, session: SessionInfo) -> None:
        self.openie()

    def end_stream(self) -> None:
        self.openie()
        self.build()

    def checkpoint(self) -> None:
        self.build()  # a mid-stream question: the graph over every passage so far (build runs openie first)

    # ------------------------------------------------------------ indexing
    def openie(self) -> None:
        """NER then triple extraction for the passages not yet indexed."""
        turns, self.pending = self.pending, []
        if not turns:
            return
        shown = [f"[{format_date(t.timestamp)}] {t.render()}" for t in turns]
        texts = [t.text + (f" [image: {t.caption}]" if t.caption else "") for t in turns]
        ner_calls = [
            ({"passage": p, "speaker": t.speaker, "text": x}, self.responder)
            for p, t, x in zip(shown, turns, texts, strict=True)
        ]
        entities = []
        for reply in ask_many(self.llm, "hipporag_ner", ner_calls, self.tally):
            ents = unique([" ".join(str(e).split()) for e in reply["named_entities"]]) if reply else []
            entities.append(ents)
        triple_calls = [
            (
                {
                    "passage": p,
                    "named_entities": json.dumps({"named_entities": ents}, ensure_ascii=False),
                    "speaker": t.speaker,
                    "text": x,
                    "entity_list": ents,
                },
                self.responder,
            )
            for p, t, x, ents in zip(shown, turns, texts, entities, strict=True)
        ]
        for turn, reply in zip(
            turns, ask_many(self.llm, "hipporag_triples", triple_calls, self.tally), strict=True
        ):
            self.passages.append(turn)
            self.triples.append(self.valid_triples(reply["triples"] if reply else []))
        self.graph = None

    def valid_triples(self, raw: list[Any]) -> list[Triple]:
        """Three non-empty normalised parts each, de-duplicated; anything else is skipped and counted."""
        out: list[Triple] = []
        for t in raw:
            parts = tuple(normalise(x) for x in t) if isinstance(t, (list, tuple)) else ()
            if len(parts) != 3 or not all(parts):
                self.tally["skipped_invalid_triple"] += 1
                continue
            if parts not in out:
                out.append(parts)  # type: ignore[arg-type]
        self.tally["triples"] += len(out)
        return out

    def build(self) -> None:
        """Embed passages, phrases and facts, and build the graph (``add_fact_edges``, ``add_passage_edges``,
        ``add_synonymy_edges``, ``add_new_edges``)."""
        self.openie()
        n_p = len(self.passages)
        self.phrases = list(dict.fromkeys(x for ts in self.triples for t in ts for x in (t[0], t[2])))
        self.facts = list(dict.fromkeys(t for ts in self.triples for t in ts))
        phrase_id = {p: i for i, p in enumerate(self.phrases)}
        n_e = len(self.phrases)
        texts = [t.render() for t in self.passages] + self.phrases + [str(f) for f in self.facts]
        vecs = self.embedder.encode(texts) if texts else np.zeros((0, self.embedder.dim), dtype=np.float32)
        self.passage_vecs, self.phrase_vecs = vecs[:n_p], vecs[n_p : n_p + n_e]
        self.fact_vecs = vecs[n_p + n_e :]
        self.phrase_passages = [0] * n_e
        stats: dict[tuple[int, int], float] = {}
        for pi, ts in enumerate(self.triples):
            ents: dict[int, None] = {}
            for s, _, o in ts:
                a, b = phrase_id[s], phrase_id[o]
                stats[(a, b)] = stats.get((a, b), 0.0) + 1
                stats[(b, a)] = stats.get((b, a), 0.0) + 1
                ents.update({a: None, b: None})
            for e in ents:
                stats[(n_e + pi, e)] = 1.0
                self.phrase_passages[e] += 1
        n_syn = 0
        sims = self.phrase_vecs @ self.phrase_vecs.T if n_e else np.zeros((0, 0))
        for a in range(n_e):
            if len(self.phrases[a].replace(" ", "")) <= 2:
                continue
            order = np.lexsort((np.arange(n_e), -sims[a]))
            found = 0
            for b in order:
                if sims[a, b] < self.synonym_threshold or found > self.synonym_max:
                    break
                if b != a:
                    stats[(a, int(b))] = float(sims[a, b])
                    found += 1
                    n_syn += 1
        edges = [k for k in stats if k[0] != k[1]]
        self.graph = ig.Graph(n=n_e + n_p, edges=edges, directed=False)
        self.graph.es["weight"] = [stats[k] for k in edges]
        self.n_phrases = n_e
        self.tally["synonym_edges"] = n_syn

    # ------------------------------------------------------------ retrieval
    def retrieve(self, query: str, when: datetime | None = None) -> RetrievalResult:
        if self.graph is None or self.pending:
            self.build()
        if not self.passages:
            return RetrievalResult(units=())
        t0 = time.perf_counter()
        q = self.embedder.encode_one(query)
        with single_thread_blas():
            dense = min_max(self.passage_vecs @ q)
        t1 = time.perf_counter()
        kept = self.recognise(query, q)
        t2 = time.perf_counter()
        if not kept:
            self.tally["dense_fallback"] += 1
            scores = dense
        else:
            scores = self.ppr(self.reset_vector(kept, dense))
        order = np.lexsort((np.arange(len(scores)), -scores))[: self.retrieval_top_k]
        units = tuple(turn_unit(self.passages[i], float(scores[i])) for i in order)
        t3 = time.perf_counter()
        timings = {"embed": 1000 * (t1 - t0), "filter": 1000 * (t2 - t1), "ppr": 1000 * (t3 - t2)}
        return RetrievalResult(units=units, timings_ms=timings)

    def recognise(self, query: str, q: np.ndarray) -> list[tuple[int, float]]:
        """Top facts by normalised cosine, then the filter call: ``[(fact index, fact score)]`` kept, best first."""
        if not self.facts:
            return []
        with single_thread_blas():
            fact_scores = min_max(self.fact_vecs @ q)
        cand = list(np.lexsort((np.arange(len(fact_scores)), -fact_scores))[: self.linking_top_k])
        shown = [list(self.facts[i]) for i in cand]
        variables = {
            "question": query,
            "facts": json.dumps({"fact": shown}, ensure_ascii=False),
            "candidates": shown,
            "speakers": sorted({t.speaker for t in self.passages}),
        }
        reply = ask(self.llm, "hipporag_filter", variables, self.responder, self.tally)
        if reply is None:
            return []
        kept: list[tuple[int, float]] = []
        for f in reply["fact"]:
            idx = closest_candidate(f, [self.facts[i] for i in cand], self.filter_match_cutoff)
            if idx is None:
                self.tally["skipped_unknown_fact"] += 1
                continue
            idx = int(cand[idx])
            if all(k != idx for k, _ in kept):
                kept.append((idx, float(fact_scores[idx])))
        return kept

    def reset_vector(self, kept: list[tuple[int, float]], dense: np.ndarray) -> np.ndarray:
        """Phrase seeds (fact score / passages with the phrase, averaged, top ``linking_top_k``) + passage seeds."""
        n_e = self.n_phrases
        weights = np.zeros(n_e + len(self.passages))
        occurs = np.zeros(n_e)
        phrase_id = {p: i for i, p in enumerate(self.phrases)}
        for idx, score in kept:
            s, _, o = self.facts[idx]
            for phrase in (s, o):
                e = phrase_id[phrase]
                weights[e] += score / self.phrase_passages[e] if self.phrase_passages[e] else score
                occurs[e] += 1
        seeded = occurs > 0
        weights[:n_e][seeded] /= occurs[seeded]
        top = np.lexsort((np.arange(n_e), -weights[:n_e]))[: self.linking_top_k]
        phrase_w = np.zeros(n_e)
        phrase_w[top] = weights[:n_e][top]
        weights[:n_e] = phrase_w
        weights[n_e:] = dense * self.passage_node_weight
        return weights

    def ppr(self, reset: np.ndarray) -> np.ndarray:
        """Personalized PageRank mass of each passage node (igraph, prpack), as ``run_ppr``."""
        reset = np.where(np.isnan(reset) | (reset < 0), 0, reset)
        if reset.sum() <= 0:
            reset = np.ones_like(reset)
        assert self.graph is not None
        with single_thread_openmp():  # allmem.threads: 10-300x faster on shared cores, and deterministic
            mass = self.graph.personalized_pagerank(
                damping=self.damping,
                directed=False,
                weights="weight",
                reset=reset.tolist(),
                implementation="prpack",
            )
        return np.asarray(mass[self.n_phrases :])

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"passages": len(self.passages)}
        if self.graph is not None:
            out |= {"phrases": self.n_phrases, "facts": len(self.facts), "edges": self.graph.ecount()}
        return out | self.tally.as_stats()
