"""Chapter engines the pool supervisor ticks: autoscale, fairness, load generator, scheduler
replicas (fleet, locks, shards) and webhook delivery."""
