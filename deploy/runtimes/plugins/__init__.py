"""The runtimes, one plugin module each (or one per library, its precisions as parameters):
each declares RuntimePlugin records (runtimes/plugin.py) that runtimes/catalog.py registers."""
