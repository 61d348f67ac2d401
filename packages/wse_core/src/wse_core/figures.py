"""The text and the files of the stack's matplotlib pictures: a name shown as it was typed, a
PNG written whole, and no Python warnings on a run that succeeds.

Contract. `plain(text)` is a name a user gave (a wafer, model, run, region or unit) in the
form matplotlib shows as typed: each `$` escaped, because two of them make mathtext of the
text between (hunt 68: a wafer named `cs2 $\\frac$` was a ParseSyntaxException traceback
after the run, and `$5 and $6` showed as an italic "5and6"). Text the code writes itself is
given as it is. `save_png(fig, path, dpi=)` writes the figure to `path` as a PNG whatever the
name (hunt 68: `--png .png` has no suffix to pathlib, and matplotlib read the format "part"
from the temporary name), whole or not at all (`wse_core.host.atomic`), and closes it. It
draws with matplotlib's missing-glyph warnings silenced: an emoji or a `\\r` in a name is
drawn as a box, and the two-line `UserWarning` it raised broke the stack's one line per
fact (hunt 68). Figures lay themselves out while drawing (`layout="tight"` or
`"constrained"`), so that each warning of the layout comes inside `save_png` too.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["plain", "glyph_warnings_silenced", "save_png"]

# matplotlib._text_helpers.warn_on_missing_glyph: "Glyph 128640 (\N{ROCKET}) missing from
# font(s) DejaVu Sans." (DOTALL: the character itself may be a line break)
_MISSING_GLYPH = r"(?s)Glyph \d+ \(.*\) missing from font"


def plain(text: object) -> str:
    """`text` escaped so that matplotlib draws it as typed (module contract)."""
    return str(text).replace("$", r"\$")


@contextlib.contextmanager
def glyph_warnings_silenced() -> Iterator[None]:
    """Draw inside this block without matplotlib's missing-glyph warnings (others stay)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_MISSING_GLYPH, category=UserWarning)
        yield


def save_png(fig: Any, path: str | Path, *, dpi: int, **savefig: Any) -> Path:
    """Write `fig` to `path` as a PNG (module contract) and close it; returns the path."""
    import matplotlib.pyplot as plt

    from wse_core.host.atomic import atomic_path

    path = Path(path)
    try:
        with glyph_warnings_silenced(), atomic_path(path) as tmp:
            fig.savefig(tmp, format="png", dpi=dpi, **savefig)
    finally:
        plt.close(fig)
    return path
