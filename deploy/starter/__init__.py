"""Starter configs for a model nobody configured: what calling the model teaches
(inspection.py: its outputs, per-image detections, determinism, NaN, batch
independence), the inputs' entries (entries.py: dims named by role, a batch dim only
where every input has it, values that mean something for integer inputs) and the
config's text (text.py). A library below both `deploy init` (commands/init.py) and
`deploy.optimize` (live_model.py): neither reaches into the other.
"""
