"""Triton serving, shared by the smoke stage, the bench stage and `deploy serve`: the
server spec and its lifecycle (`server`), the repository layout (`layout`,
`repository`), request building and checks (`checks`), and the python-backend model
(`python_model.py`, an asset copied into repositories, never imported here).

Imports no stage and no app code; tritonclient is imported only by `checks`."""
