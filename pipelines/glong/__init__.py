"""G-Long (seed 003): graph-enhanced memory management for long-term dialogue agents.

- :mod:`.importance`: attention-aware importance scores (Eqs. 1-3) from a T5 summariser's cross-attention,
  or (small profile) a decoder-only summariser's self-attention;
- :mod:`.summariser`: the small profile's decoder-only summariser (pairs, LoRA training, the saved folder);
- :mod:`.graph`: the graph memory bank (entities in a vector index, triplets as edges);
- :mod:`.retrieve`: associative retrieval with two-stage hybrid re-ranking (Eq. 4);
- :mod:`.extractor`: the triplet extractor's prompt, strict JSON parsing and triplet F1;
- :mod:`.embedding`: the MiniLM embedder and a deterministic hashing embedder;
- :mod:`.config`: typed settings with the paper's defaults.

The memory strategy that puts these together is :mod:`pipelines.memory.graph`.
"""
