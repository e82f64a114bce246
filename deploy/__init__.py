"""The app: the `deploy` command line (run, plan, validate, serve, doctor, bench, cache)
on top of the engine (`pipeline`), the stages (`stages`) and the libraries they share
(`runtimes`, `serving`)."""
