"""Re-ranking (issue #18): a cross-encoder over a first stage's top candidates."""
