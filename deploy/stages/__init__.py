"""Stage modules: each defines SPEC = StageSpec(...). Heavy imports stay inside functions."""
