"""The hostile cases each session's hunts added (and issue 54's found ones), in the order the
bench runs them: `hostile_cases.cases()` appends `hunt_cases()` to its own. Each session's
cases live in `hostile_cases_huntNN.py`; a new session adds its import and its call here."""

from __future__ import annotations

from hostile_cases import Case


def hunt_cases() -> list[Case]:
    """Issue 54's found cases, the more cases of hunts 57-60, then each session's, in order."""
    from hostile_cases_found import found_cases  # issue 54's
    from hostile_cases_hunt61 import hunt61_cases
    from hostile_cases_hunt62 import hunt62_cases  # session 62's: hunts 62 and 63
    from hostile_cases_hunt64 import hunt64_cases  # session 65's
    from hostile_cases_hunt65 import hunt65_cases  # session 66's
    from hostile_cases_hunt67 import hunt67_cases  # session 67's
    from hostile_cases_hunt68 import hunt68_cases  # session 68's
    from hostile_cases_hunt69 import hunt69_cases  # session 69's
    from hostile_cases_hunt70 import hunt70_cases  # session 70's
    from hostile_cases_hunt71 import hunt71_cases  # session 71's
    from hostile_cases_hunt72 import hunt72_cases  # session 72's
    from hostile_cases_hunt73 import hunt73_cases  # session 73's
    from hostile_cases_hunt74 import hunt74_cases  # session 74's
    from hostile_cases_hunt75 import hunt75_cases  # session 75's
    from hostile_cases_hunt76 import hunt76_cases  # session 76's
    from hostile_cases_hunt77 import hunt77_cases  # session 77's
    from hostile_cases_hunt78 import hunt78_cases  # session 78's
    from hostile_cases_hunt79 import hunt79_cases  # session 79's
    from hostile_cases_hunt80 import hunt80_cases  # session 80's review
    from hostile_cases_hunt81 import hunt81_cases  # session 81's
    from hostile_cases_more import hunt59_cases, hunt60_cases, more_cases  # hunts 57, 59, 60

    return [*found_cases(), *more_cases(),
            *hunt59_cases(), *hunt60_cases(), *hunt61_cases(), *hunt62_cases(),
            *hunt64_cases(), *hunt65_cases(),
            *hunt67_cases(), *hunt68_cases(), *hunt69_cases(),
            *hunt70_cases(), *hunt71_cases(), *hunt72_cases(), *hunt73_cases(),
            *hunt74_cases(), *hunt75_cases(), *hunt76_cases(),
            *hunt77_cases(), *hunt78_cases(), *hunt79_cases(), *hunt80_cases(),
            *hunt81_cases()]  # fmt: skip
