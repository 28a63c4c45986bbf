"""A local BM25 retriever over corpus.jsonl (rank_bm25's Okapi BM25), the Search-R1 example's search tool.

Search-R1 (and slime's examples/search-r1) query a retrieval server over HTTP; here the index lives in
the rollout process and the tool is a plain function, run by rlrun's ToolRunner off the event loop
with rollout.tool_timeout_s. Swap `search` for an HTTP call to a real retriever (e.g. an e5 / FAISS
server over Wikipedia) without touching the environment.
"""
from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

CORPUS = Path(__file__).parent / "corpus.jsonl"
TOPK = 3


def tokenize(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


@lru_cache(maxsize=1)
def index():
    from rank_bm25 import BM25Okapi

    docs = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
    return BM25Okapi([tokenize(d["title"] + " " + d["text"]) for d in docs]), docs


def search(query: str, topk: int = TOPK) -> str:
    """The top-k documents for `query`, formatted as Search-R1 formats passages ("Doc i(Title: t) text")."""
    bm25, docs = index()
    scores = bm25.get_scores(tokenize(query))
    best = sorted(range(len(docs)), key=lambda i: -scores[i])[:topk]
    return "\n".join(f"Doc {k + 1}(Title: {docs[i]['title']}) {docs[i]['text']}" for k, i in enumerate(best))
