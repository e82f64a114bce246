"""Triton serving, shared by the smoke, bench and triton_search stages and by `deploy
serve` / `deploy infer`: the server spec (`spec`) and its lifecycle (`tritonserver`,
`launch`, `ports`, `model_state`), the repository layout (`layout`, `repository`), what
is published where (`publishing`), requests and load sweeps (`requests`, `perf`), the
service settings and client (`service`, `service_client`), smoke's record
(`smoke_report`), and the python-backend models copied into repositories as assets,
never imported here (`python_model.py`, `pre_model.py`, `post_model.py`).

Imports no stage and no app code; tritonclient is imported inside the functions that
send requests."""
