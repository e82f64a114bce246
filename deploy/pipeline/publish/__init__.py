"""How a verified tree leaves the store: publishing to a directory or object
storage, checking what was published, and verify-then-publish."""
