"""The app's console output: the live run display, the closing screen, the terminal's
capabilities, and the reporter a run talks to."""
