"""The long runs' progress bar: drawn on a terminal, nothing at all elsewhere."""

import io
import sys

from wse_core.host.progress import progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_on_a_terminal_and_silence_elsewhere(monkeypatch):
    plain = io.StringIO()
    monkeypatch.setattr(sys, "stdout", plain)
    with progress(10, "training") as done:
        for n in range(1, 11):
            done(n)
    assert plain.getvalue() == ""  # a file, a pipe, a test: not one character

    term = _Terminal()
    monkeypatch.setattr(sys, "stdout", term)
    with progress(10, "training") as done:
        done(5)
    assert "training" in term.getvalue()  # rich drew the bar (then cleared it: transient)

    quiet = _Terminal()
    monkeypatch.setattr(sys, "stdout", quiet)
    with progress(10, "training", quiet=True) as done:  # e.g. not process 0
        done(5)
    assert quiet.getvalue() == ""
