"""The pipeline's worker side: broker mechanics on Redis, RQ job functions, the pool supervisor."""
