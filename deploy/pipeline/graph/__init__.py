"""What a config declares: the stage contract, the registry, the graph built from
artifacts, cache keys and digests, and the plan derived from them."""
