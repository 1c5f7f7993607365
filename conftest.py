"""Settings for every test pytest collects here: tests/, the doctests in labkit/ and the
tutorials in notebooks/ (run by nbval, in this process's environment)."""

import os

# Tutorial 04 trains for LABKIT_TUTORIAL_SECONDS (10 s when a reader runs it, so there is time
# to press the dashboard's buttons). Under nbval nobody presses them: its cells run the same
# code, and reach the same end, in 3 s of training.
os.environ.setdefault("LABKIT_TUTORIAL_SECONDS", "3")
