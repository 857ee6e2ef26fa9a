"""The words of a parity verdict: the verdict itself and the causes that explain a difference.

Their own module so that the report (which renders through :mod:`.document`) and the modules
that word a report (:mod:`.explain`, :mod:`.document`) all read them without importing each other.
"""

from __future__ import annotations

import enum

__all__ = ["CAUSES", "REAL_DIFFERENCE", "REASSOCIATION", "ROUNDING_PLACEMENT", "UNEXPLAINED", "Verdict"]

# What explains an output's difference from CPU eager (None: there is none, bit for bit).
ROUNDING_PLACEMENT = "rounding placement"
REASSOCIATION = "reassociation"
REAL_DIFFERENCE = "real difference"
UNEXPLAINED = "unexplained"  # the replays were unavailable, so no cause is established
CAUSES = (ROUNDING_PLACEMENT, REASSOCIATION, REAL_DIFFERENCE, UNEXPLAINED)


class Verdict(str, enum.Enum):
    """The outcome, in the manner of pytorch/xla's benchmarks verifier."""

    PASS = "PASS"  # XLA matches CPU eager within the tolerances.
    FAIL = "FAIL"  # It does not; the explanation says which cause accounts for it.
    NONDETERMINISTIC_REFERENCE = "NONDETERMINISTIC_REFERENCE"  # two CPU runs disagree.
    EXCEPTION = "EXCEPTION"  # the user's function raised on a backend; nothing was compared.

    def __str__(self) -> str:
        return self.value
