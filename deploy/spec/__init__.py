"""The spec: what a config declares about the model and the pipeline (config.py, tensors.py)."""
