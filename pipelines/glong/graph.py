"""The graph memory bank of G-Long (seed 003, section 3.3): G = (V, E).

- Nodes V: unique entities (subjects and objects), keyed by their normalised text (whitespace
  collapsed, case-folded); each node keeps its first-seen surface form (``name``) and an integer
  ``vid``, its id in a dense vector index of entity embeddings (L2-normalised, so inner product =
  cosine): exact search up to 10,000 entities and hnswlib HNSW beyond by default, or either
  always (:mod:`.entity_index`). The paper used ChromaDB; ``benchmarks/graph_retrieval.py`` compares.
- Edges E: a networkx MultiDiGraph (several relations may join the same two entities); each edge
  is one stored triplet, keyed by an integer triplet id ``tid`` that is never reused, carrying the
  attribute-rich container of the paper, e_ij = (r, I, t_created, t_access), plus its provenance:
  ``relation``, ``importance`` (Eq. 3), ``created``, ``last_accessed`` (POSIX seconds),
  ``turn_id``, ``session_id``, ``speaker``, ``episode_id`` and the serialised ``text``
  ("subject relation object").
- A column store indexed by tid mirrors what retrieval reads for every candidate (the triplet-text
  embedding, importance, last-accessed time, a hash of the text for de-duplication, whether another
  live triplet has the same text, the vids of both ends), so scoring thousands of candidates is one
  vectorised numpy step.
- An incidence index by vid: for each entity, the tids of its triplets (either direction, each
  once), ascending, as a list (appends are cheap) with a cached int64 array of it (rebuilt on first
  read after a change); gathering the h-hop candidates of the anchors is a concatenation of a few
  arrays, not a walk over networkx's adjacency dicts.

Deletion (by triplet, entity, session, turn or speaker) cascades to every structure: the edge,
its column-store row (zeroed), its cached vector in the embedder (unless another live triplet has
the same text), and every entity node left without an edge (graph node, vector-index entry, id
map). :meth:`GraphMemoryBank.integrity_errors` checks that all structures agree.

Saved as a folder: ``graph.json`` (networkx node-link data + metadata), ``entities.faiss``
(``faiss.write_index``; ``entities.hnsw`` for HNSW), ``triplet_vectors.npy`` and
``triplet_ids.npy``; :meth:`load` restores an identical bank (same attributes, same retrieval
results).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import networkx as nx
import numpy as np

from pipelines.data.loaders.base import load_json
from pipelines.data.schema import Triplet
from pipelines.errors import DataError
from pipelines.glong.entity_index import (FILE_NAMES, AutoEntityIndex, IndexKind, load_index,
                                          make_index)

FORMAT = "mnemos.glong.graph"
FORMAT_VERSION = 1
GRAPH_FILE, VECTORS_FILE, IDS_FILE = "graph.json", "triplet_vectors.npy", "triplet_ids.npy"


def entity_key(name: str) -> str:
    """The node key of an entity: whitespace collapsed, case-folded ("A  Brewery" -> "a brewery")."""
    return " ".join(name.split()).casefold()


def text_key(text: str) -> int:
    """A stable 64-bit hash of a serialised triplet (identical texts are one fact when ranking)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little",
                          signed=True)


@dataclass(frozen=True)
class NewFact:
    """A triplet to store, with its importance, time and provenance."""

    triplet: Triplet
    importance: float = 1.0          # Eq. (3) score in [0, 1] (1.0 under uniform importance)
    time: float = 0.0                # creation time, POSIX seconds (the session's time)
    turn_id: str | None = None       # the turn the triplet was extracted from
    session_id: str | None = None    # that turn's session
    speaker: str | None = None       # who said it
    episode_id: str | None = None    # the episode (a bank may hold several)


@dataclass(frozen=True)
class StoredFact:
    """A stored edge: the triplet, its attributes and its provenance."""

    tid: int
    subject: str
    relation: str
    object: str
    text: str
    importance: float
    created: float
    last_accessed: float
    turn_id: str | None
    session_id: str | None
    speaker: str | None
    episode_id: str | None

    @property
    def triplet(self) -> Triplet:
        return Triplet(subject=self.subject, relation=self.relation, object=self.object)


class GraphMemoryBank:
    """Entities in a vector index, triplets as attribute-rich edges of a MultiDiGraph."""

    def __init__(self, embedder, entity_index: IndexKind = "auto",
                 exact_up_to: int = AutoEntityIndex.THRESHOLD):
        if entity_index not in FILE_NAMES:
            raise ValueError(f"entity_index must be 'auto', 'flat' or 'hnsw', got {entity_index!r}")
        self.exact_up_to = exact_up_to       # "auto": exact search up to this many entities
        self.embedder = embedder             # has embed(texts) -> (N, D) normalised, forget(texts)
        self.index_kind = entity_index       # "auto", "flat" (exact) or "hnsw" (hnswlib)
        self.graph = nx.MultiDiGraph()
        self._index = None                   # the entity vector index, built on first add
        self._vid_node: dict[int, str] = {}  # vector-index id -> node key
        self._inc: dict[int, list[int]] = {}  # vid -> tids touching the entity, ascending
        self._inc_arr: dict[int, np.ndarray] = {}  # vid -> its list as int64 (a cache)
        self._same_text: dict[int, list[int]] = {}  # text hash -> live tids with that text
        self._ends: dict[int, tuple[str, str]] = {}  # tid -> (subject key, object key)
        self._next_tid = 0
        self._next_vid = 0
        self.dim: int | None = None
        self._alloc(0, 0)

    # --- column store ------------------------------------------------------------------------
    def _alloc(self, capacity: int, dim: int) -> None:
        # One float32 row per tid holds everything retrieval reads of a candidate: the D vector
        # components, then (8-byte aligned) four 8-byte slots: importance, last accessed
        # (float64 seconds), text hash (int64), "another live triplet has this text" (0 / 1).
        # Gathering C candidates is then one fancy-index copy of C contiguous rows.
        self._meta_at = dim + dim % 2
        self._rows = np.zeros((capacity, self._meta_at + 8), dtype=np.float32)  # (cap, D' + 8)
        self._alive = np.zeros(capacity, dtype=bool)              # (cap,) row holds a live triplet
        self._src = np.full(capacity, -1, dtype=np.int64)         # (cap,) vid of the subject
        self._dst = np.full(capacity, -1, dtype=np.int64)         # (cap,) vid of the object
        self._bind(dim)

    def _bind(self, dim: int) -> None:
        """Named views of the packed rows (they share its memory)."""
        meta = self._rows[:, self._meta_at:]
        as_f64, as_i64 = meta.view(np.float64), meta.view(np.int64)          # (cap, 4) each
        self._vec = self._rows[:, :dim]           # (cap, D) triplet-text vectors
        self._imp = as_f64[:, 0]                  # (cap,) importance
        self._acc = as_f64[:, 1]                  # (cap,) last accessed, seconds
        self._tkey = as_i64[:, 2]                 # (cap,) text hash
        self._dup = as_f64[:, 3]                  # (cap,) 1.0: another live row has the same text

    def _columns_all(self) -> tuple[np.ndarray, ...]:
        return self._rows, self._alive, self._src, self._dst

    def _grow(self, needed: int) -> None:
        cap = self._alive.shape[0]
        if needed <= cap:
            return
        new_cap = max(needed, 2 * cap, 64)
        old = self._columns_all()
        self._alloc(new_cap, self.dim)
        for new, prev in zip(self._columns_all(), old):
            new[:cap] = prev

    # --- incidence index (vid -> tids) ---------------------------------------------------------
    def _unlink(self, vid: int, tids: set[int]) -> None:
        self._inc[vid] = [t for t in self._inc[vid] if t not in tids]
        self._inc_arr.pop(vid, None)

    def incident(self, vid: int) -> np.ndarray:
        """The tids of the triplets touching entity ``vid`` (either direction), ascending."""
        arr = self._inc_arr.get(vid)
        if arr is None:
            arr = self._inc_arr[vid] = np.array(self._inc[vid], dtype=np.int64)
        return arr

    def _link(self, tid: int, su: int, sv: int, key: int) -> None:
        """Enter a new triplet (ends ``su`` -> ``sv``, text hash ``key``) in the incidence lists
        (tids arrive in ascending order, so the lists stay sorted) and the same-text index."""
        self._inc[su].append(tid)
        if sv != su:
            self._inc[sv].append(tid)
        self._mark_text(key, tid)

    def _mark_text(self, key: int, tid: int) -> None:
        same = self._same_text.setdefault(key, [])
        same.append(tid)
        if len(same) > 1:
            self._dup[same] = 1.0

    def _unmark_text(self, key: int, tid: int) -> None:
        same = self._same_text[key]
        same.remove(tid)
        if len(same) == 1:
            self._dup[same[0]] = 0.0
        elif not same:
            del self._same_text[key]

    def _ensure_index(self, dim: int) -> None:
        if self._index is None:
            self.dim = dim
            self._index = make_index(self.index_kind, dim, self.exact_up_to)
            self._alloc(0, dim)
        elif dim != self.dim:
            raise ValueError(f"the embedder returned {dim}-dimensional vectors, the bank holds "
                             f"{self.dim}-dimensional ones")

    # --- adding ------------------------------------------------------------------------------
    def add(self, facts: Sequence[NewFact]) -> list[int]:
        """Store ``facts`` as new edges (new entities are embedded and indexed); return tids."""
        facts = list(facts)
        for i, fact in enumerate(facts):
            ok = isinstance(fact.importance, (int, float)) and math.isfinite(fact.importance)
            if not ok or not 0.0 <= fact.importance <= 1.0:
                raise DataError(f"importance must lie in [0, 1], got {fact.importance!r}",
                                record=fact.turn_id or f"fact {i}", field="importance")
            if not math.isfinite(fact.time):
                raise DataError(f"time must be finite, got {fact.time!r}",
                                record=fact.turn_id or f"fact {i}", field="time")
        if not facts:
            return []
        texts = [f.triplet.serialise() for f in facts]
        ends = [(entity_key(f.triplet.subject), entity_key(f.triplet.object)) for f in facts]
        new_nodes: dict[str, str] = {}                        # key -> surface form, first seen
        for f, pair in zip(facts, ends):
            for name, key in zip((f.triplet.subject, f.triplet.object), pair):
                if key not in self.graph and key not in new_nodes:
                    new_nodes[key] = " ".join(name.split())
        unique_texts = list(dict.fromkeys(texts))
        text_vecs = np.asarray(self.embedder.embed(unique_texts), dtype=np.float32)  # (U, D)
        self._ensure_index(text_vecs.shape[1])
        row_of = {t: r for r, t in enumerate(unique_texts)}
        if new_nodes:
            node_vecs = np.asarray(self.embedder.embed(list(new_nodes.values())),
                                   dtype=np.float32)                                # (M, D)
            vids = np.arange(self._next_vid, self._next_vid + len(new_nodes), dtype=np.int64)
            self._index.add(vids, node_vecs)
            for vid, (key, name) in zip(vids.tolist(), new_nodes.items()):
                self.graph.add_node(key, name=name, vid=vid)
                self._vid_node[vid] = key
                self._inc[vid] = []
            self._next_vid += len(new_nodes)
        tids = list(range(self._next_tid, self._next_tid + len(facts)))
        self._grow(tids[-1] + 1)
        nodes = self.graph.nodes
        src, dst, keys = [], [], []
        for tid, f, text, (u, v) in zip(tids, facts, texts, ends):
            self.graph.add_edge(u, v, key=tid, subject=f.triplet.subject,
                                relation=f.triplet.relation, object=f.triplet.object, text=text,
                                importance=float(f.importance), created=float(f.time),
                                last_accessed=float(f.time), turn_id=f.turn_id,
                                session_id=f.session_id, speaker=f.speaker,
                                episode_id=f.episode_id)
            self._ends[tid] = (u, v)
            su, sv = nodes[u]["vid"], nodes[v]["vid"]
            src.append(su)
            dst.append(sv)
            key = text_key(text)
            keys.append(key)
            self._link(tid, su, sv, key)
        for vid in set(src) | set(dst):
            self._inc_arr.pop(vid, None)
        span = slice(tids[0], tids[-1] + 1)
        self._src[span], self._dst[span], self._tkey[span] = src, dst, keys
        self._vec[span] = text_vecs[[row_of[t] for t in texts]]
        self._imp[span] = [float(f.importance) for f in facts]
        self._acc[span] = [float(f.time) for f in facts]
        self._alive[span] = True
        self._next_tid += len(facts)
        return tids

    # --- reading -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._ends)

    @property
    def n_entities(self) -> int:
        return self.graph.number_of_nodes()

    def __contains__(self, tid: int) -> bool:
        return tid in self._ends

    def fact(self, tid: int) -> StoredFact:
        u, v = self._ends[tid]
        a = self.graph._succ[u][v][tid]          # the edge's attribute dict (no view wrappers)
        return StoredFact(tid=tid, subject=a["subject"], relation=a["relation"], object=a["object"],
                          text=a["text"], importance=a["importance"], created=a["created"],
                          last_accessed=a["last_accessed"], turn_id=a["turn_id"],
                          session_id=a["session_id"], speaker=a["speaker"],
                          episode_id=a["episode_id"])

    def facts(self) -> list[StoredFact]:
        """Every stored fact, in tid (insertion) order."""
        return [self.fact(tid) for tid in sorted(self._ends)]

    def entity_names(self) -> list[str]:
        return [self.graph.nodes[n]["name"] for n in self.graph.nodes]

    def embed_query(self, text: str) -> np.ndarray:
        return np.asarray(self.embedder.embed([text]), dtype=np.float32)[0]      # (D,)

    def nearest_vids(self, query_vec: np.ndarray, k: int) -> np.ndarray:
        """Vids of the top-k entity nodes by cosine to ``query_vec`` (D,): the same set as
        :meth:`nearest_entities`, in no particular order (the anchors of retrieval)."""
        if self._index is None or len(self._index) == 0:
            return np.zeros(0, dtype=np.int64)
        return self._index.top_ids(query_vec, k)                              # (k,)

    def nearest_entities(self, query_vec: np.ndarray, k: int) -> list[tuple[str, float]]:
        """Top-k entity nodes by cosine to ``query_vec`` (D,): [(node key, cosine)], best first."""
        if self._index is None or len(self._index) == 0:
            return []
        ids, scores = self._index.search(query_vec, k)                       # (k,), (k,)
        return [(self._vid_node[int(i)], float(s)) for i, s in zip(ids, scores)]

    def edges_within(self, nodes: Iterable[str], hops: int) -> np.ndarray:
        """Tids of the triplets within ``hops`` hops of ``nodes`` (ascending, int64).

        1 hop = every edge touching a node (either direction); h hops = every edge touching a node
        reachable from ``nodes`` in at most h - 1 undirected steps.
        """
        node_attrs = self.graph.nodes
        return self.tids_within([node_attrs[n]["vid"] for n in nodes], hops)

    def tids_within(self, vids: Iterable[int] | np.ndarray, hops: int) -> np.ndarray:
        """:meth:`edges_within` for entity vids: array work on the incidence index."""
        reached = np.unique(np.asarray(vids, dtype=np.int64))                 # (R,)
        frontier = reached
        for _ in range(hops - 1):
            if frontier.size == 0:
                break
            tids = self._incident_to(frontier.tolist())                       # (T,)
            ends = np.union1d(self._src[tids], self._dst[tids])              # (E,)
            frontier = np.setdiff1d(ends, reached, assume_unique=True)
            reached = np.union1d(reached, frontier)
        return self._incident_to(reached.tolist())

    def _incident_to(self, vids: list[int]) -> np.ndarray:
        """The union of the incidence lists of distinct ``vids`` (ascending, int64)."""
        if len(vids) == 1:                     # one list: already ascending and unique
            return self.incident(vids[0]).copy()
        if not vids:
            return np.zeros(0, dtype=np.int64)
        tids = np.concatenate([self.incident(v) for v in vids])
        tids.sort()
        keep = np.empty(tids.size, dtype=bool)   # drop repeats (edges between two of the vids)
        keep[:1] = True
        np.not_equal(tids[1:], tids[:-1], out=keep[1:])
        return tids[keep]

    def shares_text(self, tids: np.ndarray) -> np.ndarray:
        """(C,) bool: whether another live triplet has the same serialised text as each tid."""
        return self._dup[tids] != 0

    def gather(self, tids: np.ndarray) -> tuple[np.ndarray, ...]:
        """What retrieval reads of candidates ``tids`` (C,), from one copy of their packed rows:
        (vectors (C, D), importance (C,), last_accessed (C,), text hashes (C,), shares_text (C,))."""
        block = self._rows[tids]                                              # (C, D' + 8)
        meta = block[:, self._meta_at:]
        as_f64 = meta.view(np.float64)                                        # (C, 4)
        return (block[:, :self.dim], as_f64[:, 0], as_f64[:, 1], meta.view(np.int64)[:, 2],
                as_f64[:, 3] != 0)

    def touch(self, tids: Iterable[int], now: float) -> None:
        """Set the last-accessed time of ``tids`` to ``now`` (never moves a time backwards)."""
        succ = self.graph._succ
        for tid in tids:
            u, v = self._ends[tid]
            attrs = succ[u][v][tid]
            attrs["last_accessed"] = max(attrs["last_accessed"], float(now))
            self._acc[tid] = attrs["last_accessed"]

    # --- deletion ----------------------------------------------------------------------------
    def remove_triplets(self, tids: Iterable[int]) -> list[int]:
        """Remove the given triplets from every structure; drop entities left without edges."""
        removed, touched, texts = [], set(), []
        unlink: dict[int, set[int]] = {}                  # vid -> its removed tids
        for tid in sorted(set(tids)):
            if tid not in self._ends:
                continue
            u, v = self._ends.pop(tid)
            texts.append(self.graph.edges[u, v, tid]["text"])
            self.graph.remove_edge(u, v, key=tid)
            for vid in {int(self._src[tid]), int(self._dst[tid])}:
                unlink.setdefault(vid, set()).add(tid)
            self._unmark_text(int(self._tkey[tid]), tid)
            self._vec[tid] = 0.0
            self._imp[tid] = self._acc[tid] = 0.0
            self._tkey[tid], self._alive[tid], self._dup[tid] = 0, False, 0.0
            self._src[tid] = self._dst[tid] = -1
            touched.update((u, v))
            removed.append(tid)
        for vid, gone in unlink.items():
            self._unlink(vid, gone)
        orphans = [n for n in touched if self.graph.degree(n) == 0]
        self._drop_nodes(orphans)
        self._forget_texts([t for t in dict.fromkeys(texts) if text_key(t) not in self._same_text])  # none held
        return removed

    def _drop_nodes(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        names = [self.graph.nodes[k]["name"] for k in keys]
        vids = np.asarray([self.graph.nodes[k]["vid"] for k in keys], dtype=np.int64)
        self._index.remove(vids)
        for key, vid in zip(keys, vids.tolist()):
            del self._vid_node[vid]
            self._inc.pop(vid, None)
            self._inc_arr.pop(vid, None)
            self.graph.remove_node(key)
        self._forget_texts(names)

    def _forget_texts(self, texts: Sequence[str]) -> None:
        forget = getattr(self.embedder, "forget", None)
        if forget is not None and texts:
            forget(list(texts))

    def remove_entity(self, name: str) -> list[int]:
        """Remove an entity and every triplet that has it as subject or object."""
        key = entity_key(name)
        if key not in self.graph:
            return []
        tids = self.edges_within([key], hops=1).tolist()
        removed = self.remove_triplets(tids)
        if key in self.graph:  # no edges at all (cannot happen after add, but stay total)
            self._drop_nodes([key])
        return removed

    def remove_where(self, predicate: Callable[[StoredFact], bool]) -> list[int]:
        """Remove every triplet whose stored fact satisfies ``predicate``."""
        return self.remove_triplets([tid for tid in list(self._ends)
                                     if predicate(self.fact(tid))])

    def remove_session(self, session_id: str) -> list[int]:
        return self.remove_where(lambda f: f.session_id == session_id)

    def remove_turns(self, turn_ids: Iterable[str]) -> list[int]:
        turn_ids = set(turn_ids)
        return self.remove_where(lambda f: f.turn_id in turn_ids)

    def remove_speaker(self, name: str) -> list[int]:
        """Everything said by ``name`` and everything about ``name`` (its entity node)."""
        said = self.remove_where(lambda f: f.speaker is not None
                                 and entity_key(f.speaker) == entity_key(name))
        return sorted(said + self.remove_entity(name))

    def clear(self) -> None:
        self._forget_texts([f.text for f in self.facts()] + self.entity_names())
        self.__init__(self.embedder, self.index_kind, self.exact_up_to)

    # --- integrity ---------------------------------------------------------------------------
    def integrity_errors(self) -> list[str]:
        """Every disagreement between the graph, the vector index and the column store."""
        errors = []
        edge_keys = {k for _, _, k in self.graph.edges(keys=True)}
        if edge_keys != set(self._ends):
            errors.append(f"graph edges {sorted(edge_keys ^ set(self._ends))} disagree with the "
                          "tid map")
        alive = set(np.flatnonzero(self._alive).tolist())
        if alive != set(self._ends):
            errors.append(f"column-store rows {sorted(alive ^ set(self._ends))} disagree")
        dead = ~self._alive
        if self._vec[dead].any() or self._imp[dead].any() or self._acc[dead].any() \
                or self._tkey[dead].any() or self._dup[dead].any() \
                or (self._src[dead] != -1).any() or (self._dst[dead] != -1).any():
            errors.append("a removed triplet left values in the column store")
        errors += self._index_errors()
        isolated = [n for n in self.graph.nodes if self.graph.degree(n) == 0]
        if isolated:
            errors.append(f"entities without triplets: {isolated}")
        node_vids = {self.graph.nodes[n]["vid"]: n for n in self.graph.nodes}
        if node_vids != self._vid_node:
            errors.append("node vids disagree with the vector-index id map")
        if self._index is not None:
            index_ids = self._index.ids()
            if index_ids != set(self._vid_node):
                errors.append(f"vector index ids {sorted(index_ids ^ set(self._vid_node))} "
                              "disagree with the entity nodes")
        return errors

    def _index_errors(self) -> list[str]:
        """Disagreements of the incidence index, the end vids and the same-text flags."""
        errors = []
        nodes = self.graph.nodes
        expected: dict[int, set[int]] = {}
        for u, v, tid in self.graph.edges(keys=True):
            su, sv = nodes[u]["vid"], nodes[v]["vid"]
            if (self._src[tid], self._dst[tid]) != (su, sv):
                errors.append(f"triplet {tid}: stored end vids disagree with the graph")
            expected.setdefault(su, set()).add(tid)
            expected.setdefault(sv, set()).add(tid)
        if set(self._inc) != set(expected) or not set(self._inc_arr) <= set(self._inc):
            errors.append("the incidence index covers other entities than the graph")
        for vid, tids in expected.items():
            if self._inc.get(vid) != sorted(tids) or (
                    vid in self._inc_arr and self._inc_arr[vid].tolist() != sorted(tids)):
                errors.append(f"incidence list of entity {vid} disagrees with its edges")
        by_text: dict[int, list[int]] = {}
        for tid in sorted(self._ends):
            by_text.setdefault(int(self._tkey[tid]), []).append(tid)
        if {k: sorted(v) for k, v in self._same_text.items()} != by_text \
                or any(bool(self._dup[t]) != (len(same) > 1)
                       for same in by_text.values() for t in same):
            errors.append("same-text flags disagree with the stored texts")
        return errors

    # --- persistence -------------------------------------------------------------------------
    def save(self, folder: str | os.PathLike) -> Path:
        """Write the bank to ``folder`` (created): graph JSON, entity index, triplet vectors."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tids = np.asarray(sorted(self._ends), dtype=np.int64)
        meta = {"format": FORMAT, "version": FORMAT_VERSION, "dim": self.dim,
                "entity_index": self.index_kind,
                "embedder": getattr(self.embedder, "model_name", type(self.embedder).__name__),
                "next_tid": self._next_tid, "next_vid": self._next_vid,
                "graph": nx.node_link_data(self.graph, edges="edges")}
        (folder / GRAPH_FILE).write_text(json.dumps(meta), encoding="utf-8")
        if self._index is not None:
            self._index.save(folder / FILE_NAMES[self.index_kind])
        np.save(folder / VECTORS_FILE, self._vec[tids] if self.dim else np.zeros((0, 0), np.float32))
        np.save(folder / IDS_FILE, tids)
        return folder

    @classmethod
    def load(cls, folder: str | os.PathLike, embedder) -> "GraphMemoryBank":
        """Restore a bank written by :meth:`save`; ``embedder`` must be the one it was built with."""
        folder = Path(folder)
        path = folder / GRAPH_FILE
        if not path.exists():
            raise DataError("file does not exist", file=str(path))
        meta = load_json(path)
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise DataError(f"not a saved graph memory bank (expected format {FORMAT!r})",
                            file=str(path), field="format")
        if meta.get("version") != FORMAT_VERSION:
            raise DataError(f"version {meta.get('version')!r}, this code reads {FORMAT_VERSION}",
                            file=str(path), field="version")
        name = getattr(embedder, "model_name", type(embedder).__name__)
        if meta["embedder"] != name:
            raise DataError(f"the bank was embedded with {meta['embedder']!r}, not {name!r}",
                            file=str(path), field="embedder")
        kind = meta.get("entity_index")
        if kind not in FILE_NAMES:
            raise DataError(f"unknown entity index {kind!r}", file=str(path), field="entity_index")
        bank = cls(embedder, kind)
        bank.graph = nx.node_link_graph(meta["graph"], directed=True, multigraph=True,
                                        edges="edges")
        bank._next_tid, bank._next_vid = meta["next_tid"], meta["next_vid"]
        if meta["dim"] is None:
            return bank
        bank.dim = meta["dim"]
        index_file = folder / FILE_NAMES[kind]
        if not index_file.exists():
            raise DataError("file does not exist", file=str(index_file))
        bank._index = load_index(kind, index_file, bank.dim)
        if kind == "auto":
            bank.exact_up_to = bank._index.threshold
        tids = np.load(folder / IDS_FILE)
        vectors = np.load(folder / VECTORS_FILE)
        if vectors.shape != (len(tids), bank.dim):
            raise DataError(f"{vectors.shape} vectors for {len(tids)} triplets of dimension "
                            f"{bank.dim}", file=str(folder / VECTORS_FILE))
        bank._alloc(bank._next_tid, bank.dim)
        bank._vec[tids] = vectors
        bank._vid_node = {a["vid"]: n for n, a in bank.graph.nodes(data=True)}
        bank._inc = {vid: [] for vid in bank._vid_node}
        edges = sorted(bank.graph.edges(keys=True, data=True), key=lambda e: e[2])
        for u, v, tid, a in edges:                   # tid order: incidence lists ascending
            bank._ends[tid] = (u, v)
            bank._imp[tid], bank._acc[tid] = a["importance"], a["last_accessed"]
            bank._tkey[tid], bank._alive[tid] = text_key(a["text"]), True
            su, sv = bank.graph.nodes[u]["vid"], bank.graph.nodes[v]["vid"]
            bank._src[tid], bank._dst[tid] = su, sv
            bank._link(tid, su, sv, int(bank._tkey[tid]))
        errors = bank.integrity_errors()
        if errors:
            raise DataError("; ".join(errors), file=str(folder), rule="bank_consistent")
        return bank
