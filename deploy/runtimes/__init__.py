"""One runner per format, shared by every stage that runs a model and by `deploy bench`."""
