"""Where results live: the content-addressed store and its action cache, locks,
the remote cache, garbage collection, run history and what a killed run left."""
