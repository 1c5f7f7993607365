"""The fault-injection suites print what they tried at the end of the session."""

from .damage import TALLIES


def pytest_terminal_summary(terminalreporter):
    if TALLIES:
        terminalreporter.section("fault injection")
        for t in TALLIES:
            terminalreporter.write_line(str(t))
        real = [t for t in TALLIES if not t.must_fail]
        tried, held = sum(t.tried for t in real), sum(t.held for t in real)
        seconds = sum(t.seconds for t in real)
        terminalreporter.write_line(f"total: {tried} cases tried, {held} held, {seconds:.1f} s "
                                    "(without the broken readers, which must fail)")
