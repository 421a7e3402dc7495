"""One exchange's price, or why it has none, and how a price is written for people.

Prices are kept in nano-dollars (USD billionths) as integers: a sum over a million
exchanges is then exact, where adding floats would drift from the sum of what is shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

__all__ = [
    "MAX_NUSD",
    "NO_PRICE",
    "NUSD_PER_USD",
    "Price",
    "format_usd",
    "price_line",
    "to_nusd",
    "usd",
]

NUSD_PER_USD = 10**9
# The most one exchange is priced at, $1,000,000: no API call costs that, so past it a count
# is absurd (a usage of 2**63 tokens) and the exchange has no price rather than one no column
# holds (BIGINT) and no sum of a store's costs survives.
MAX_NUSD = 10**6 * NUSD_PER_USD
# Said wherever a price would be shown and there is none: never "$0".
NO_PRICE = "no price"


def to_nusd(amount: Decimal) -> int:
    """USD as nano-dollars, rounded half to even."""
    return int((amount * NUSD_PER_USD).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


def usd(nusd: int | None) -> float | None:
    """Nano-dollars as USD for JSON output; None stays None (no price is not zero)."""
    return None if nusd is None else nusd / NUSD_PER_USD


def format_usd(nusd: int | None) -> str:
    """US dollars to the micro-dollar, always six decimals: ``$0.007250``, ``$1,234.567890``.
    One rule for every surface, so figures line up in a column and never read as more or
    less precise than each other; a positive cost too small to show is ``<$0.000001``, not
    ``$0.000000`` (which would read as free)."""
    if nusd is None:
        return NO_PRICE
    amount = Decimal(nusd) / NUSD_PER_USD
    if 0 < amount < Decimal("0.000001"):
        return "<$0.000001"
    return f"${amount:,.6f}"


@dataclass(frozen=True, slots=True)
class Price:
    """``nusd`` None: no price, and ``note`` says why. With a price, ``note`` names what it
    leaves out (a count the stream never reported)."""

    nusd: int | None
    note: str | None = None
    provider: str | None = None
    model: str | None = None
    data: str | None = None

    def __post_init__(self) -> None:
        if self.nusd is not None and not -MAX_NUSD <= self.nusd <= MAX_NUSD:
            note = f"a cost past {format_usd(MAX_NUSD)} (a usage count is absurd)"
            object.__setattr__(self, "nusd", None)  # frozen: set once, here
            object.__setattr__(self, "note", note)

    def columns(self) -> dict[str, Any]:
        """The Exchange column values (migration 0006)."""
        return {
            "cost_nusd": self.nusd,
            "price_provider": self.provider,
            "price_model": self.model,
            "price_note": self.note,
            "price_data": self.data,
        }


def price_line(
    nusd: int | None,
    *,
    provider: str | None,
    model: str | None,
    note: str | None,
    data: str | None,
) -> str:
    """One exchange's price for people: what, at whose rates, from which data, and why not."""
    if data is None:
        return "not priced yet (ssetape reindex prices it)"
    if nusd is None:
        return f"{NO_PRICE}: {note or 'unknown'} ({data})"
    rates = f" at {provider} {model} rates" if provider and model else ""
    return f"{format_usd(nusd)}{rates} ({data}){f'; {note}' if note else ''}"
