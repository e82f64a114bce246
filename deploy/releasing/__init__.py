"""The app's release commands: `deploy releases` (the list) and `deploy rollback`."""
