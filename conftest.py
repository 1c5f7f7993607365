"""Settings for every test pytest collects here: tests/, the doctests in labkit/ and the
tutorials in notebooks/ (run by nbval, in this process's environment)."""

import os

import pytest

# pytest runs the tests on two processes (pytest-xdist, `-n 2` in pyproject.toml). Each gets one
# BLAS thread: two processes with two spinning OpenBLAS threads each on two cores made a
# ResNet training test 4.6x slower (93 s against 20 s alone). Set before NumPy is imported; the
# processes the tests start inherit it.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = "1"

# Tutorial 04 trains for LABKIT_TUTORIAL_SECONDS (10 s when a reader runs it, so there is time
# to press the dashboard's buttons). Under nbval nobody presses them: its cells run the same
# code, and reach the same end, in 3 s of training.
os.environ.setdefault("LABKIT_TUTORIAL_SECONDS", "3")


@pytest.hookimpl(optionalhook=True)  # NOTE: a hook of pytest-xdist, known only with it
def pytest_xdist_make_scheduler(config, log):
    """Each test file in one worker (``--dist loadfile``), and every real-browser test file in
    the same one: two JupyterLabs with a Chromium each, on two cores, made each browser test
    1.5x slower and closer to its waits' limits, for no gain."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class OneBrowserAtATime(LoadFileScheduling):
        def _split_scope(self, nodeid):
            path = super()._split_scope(nodeid)
            return "tests/browser" if path.startswith("tests/browser/") else path

    return OneBrowserAtATime(config, log)


def pytest_addoption(parser, pluginmanager):
    # NOTE: pyproject.toml's addopts pass --numprocesses and --dist: without pytest-xdist (a
    # venv made before it joined [dev], or `-p no:xdist`) they would stop pytest with
    # "unrecognized arguments". They are taken and ignored instead, and the header says that
    # the tests run in one process.
    if not pluginmanager.has_plugin("xdist"):
        parser.addoption("--numprocesses", dest="numprocesses", default=None,
                         help="ignored: pytest-xdist is not installed")
        parser.addoption("--dist", dest="dist", default="no",
                         help="ignored: pytest-xdist is not installed")


def pytest_report_header(config):
    if not config.pluginmanager.has_plugin("xdist"):
        return ("pytest-xdist is not installed: the tests run in this process "
                "(`pip install -e \".[dev]\"` installs it, for two processes)")
    return None
