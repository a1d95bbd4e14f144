"""Money in the user's currency: exchange rates the user gives, and the one formatter of an amount.

Every price and cost is held in USD (the shipped catalogs and SkyPilot's are in USD). A price file may carry a
``currency`` column (:mod:`paddlefit.catalog.price_csv`): its rows are turned into USD with the rate the user gives
(``--fx-rate CNY=7.10``: units of that currency per USD). ``--currency CNY`` prints every amount in CNY at the same
rate; ``--json`` keeps USD and records the currency and rate it was shown in. No rate is shipped: a rate goes stale
within days and this package cannot fetch one, so the user's rate, dated by them, is the only one used.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from pydantic import Field, model_validator

from paddlefit import options
from paddlefit.errors import PaddlefitError
from paddlefit.validation import RequestModel

#: An ISO 4217 alphabetic code.
CODE = re.compile(r"^[A-Z]{3}$")
#: A rate as typed: ASCII digits, an optional fraction and exponent (``7.10``, ``1e3``; not ``1_000`` or ``７``).
RATE_TEXT = re.compile(r"^[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$")
#: Units of a currency per USD accepted (the extremes of today's currencies, about 0.3 for KWD and 4e5 for IRR,
#: with room either side); outside it the rate is a typo.
RATE_RANGE = (1e-4, 1e6)
#: Symbols printed before an amount; any other currency prints its code and a space.
SYMBOLS = {"USD": "$", "CNY": "¥"}


@dataclass(frozen=True)
class Currency:
    """A currency to print amounts in.

    Attributes:
        code: ISO 4217 code (``USD``, ``CNY``).
        per_usd: units of this currency per USD (1 for USD).
        source: where the rate came from (``--fx-rate``), for the JSON and the legend.
    """

    code: str = "USD"
    per_usd: float = 1.0
    source: str = "USD: no conversion"

    @property
    def symbol(self) -> str:
        """What precedes an amount: ``$``, ``¥``, or the code and a space."""
        return SYMBOLS.get(self.code, f"{self.code} ")

    def fmt(self, usd: float | None) -> str:
        """``usd`` (USD) in this currency: two significant digits below 0.10, hundredths below 100, else whole units
        (``$0.0031``, ``¥12.34``, ``$1,234``); ``-`` for None or NaN."""
        if usd is None or (isinstance(usd, float) and math.isnan(usd)):
            return "-"
        value = usd * self.per_usd
        if value <= 0:
            return f"{self.symbol}0"
        if value < 0.1:
            return f"{self.symbol}{value:.{1 - math.floor(math.log10(value))}f}"
        return f"{self.symbol}{value:,.2f}" if value < 100 else f"{self.symbol}{value:,.0f}"

    def rate_note(self) -> str:
        """``at R CODE per USD (source); --json keeps USD`` for a converted currency, '' for USD: what every table
        printed in it says once."""
        if self.code == "USD":
            return ""
        return f"at {self.per_usd:g} {self.code} per USD ({self.source}); --json keeps USD"

    def to_dict(self) -> dict[str, object]:
        """JSON fields: code, per_usd, source."""
        return {"code": self.code, "per_usd": self.per_usd, "source": self.source}


USD = Currency()


def parse_fx_rates(items: list[str] | tuple[str, ...] | None) -> dict[str, float]:
    """``--fx-rate`` values (``CNY=7.10``: units of CNY per USD) as code -> rate.

    Raises:
        PaddlefitError: not ``CODE=RATE``, a code that is not three letters, a rate that is not an ASCII number
            within :data:`RATE_RANGE`, or one code given twice with two rates (exit 2, naming ``--fx-rate``).
    """
    rates: dict[str, float] = {}
    for item in items or ():
        code, sep, text = str(item).partition("=")
        code, text = code.strip().upper(), text.strip()
        rate = float(text) if RATE_TEXT.match(text) else float("nan")
        if not sep or not CODE.match(code) or not RATE_RANGE[0] <= rate <= RATE_RANGE[1]:
            raise PaddlefitError(
                f"`--fx-rate {item}`: give CODE=RATE, the units of an ISO 4217 currency per USD "
                f"between {RATE_RANGE[0]:g} and {RATE_RANGE[1]:g}, e.g. `--fx-rate CNY=7.10`."
            )
        if code == "USD" and rate != 1.0:
            raise PaddlefitError(f"`--fx-rate {item}`: USD is 1 USD per USD; give the other currency's rate.")
        if code in rates and rates[code] != rate:
            raise PaddlefitError(f"`--fx-rate {code}` given twice ({rates[code]:g} and {rate:g}); give one rate.")
        rates[code] = rate
    return rates


def display_currency(code: str | None, rates: dict[str, float]) -> Currency:
    """The :class:`Currency` of ``--currency CODE`` (USD when None) at the ``--fx-rate`` the user gave for it.

    Raises:
        PaddlefitError: a code that is not three letters, or no ``--fx-rate`` for it.
    """
    if code is None or code.strip().upper() == "USD":
        return USD
    c = code.strip().upper()
    if not CODE.match(c):
        raise PaddlefitError(f"`--currency {code}`: give an ISO 4217 code such as CNY or EUR.")
    if c not in rates:
        raise PaddlefitError(
            f"`--currency {c}` needs its rate: add `--fx-rate {c}=RATE` ({c} per USD, from your "
            "bank or the rate you budget with; none is shipped, it would be stale)."
        )
    return Currency(c, rates[c], f"--fx-rate {c}={rates[c]:g}")


class MoneyOptions(RequestModel):
    """The options of a command that prices: ``--currency`` and ``--fx-rate`` (mixed into its request model).

    Raises:
        PaddlefitError: (on construction) see :func:`parse_fx_rates` and :func:`display_currency`.
    """

    currency: str | None = Field(
        None,
        description="Print amounts in this ISO 4217 currency (needs its ``--fx-rate``); None: USD.",
        json_schema_extra=options.CURRENCY.field(),
    )
    fx_rates: list[str] = Field(
        default_factory=list,
        description="``CODE=RATE``: units of a currency per USD, for "
        "price files in that currency and for ``--currency``.",
        json_schema_extra=options.FX_RATE.field(),
    )

    @model_validator(mode="after")
    def _money(self) -> MoneyOptions:
        """Rates and the display currency checked before any work."""
        self.display()
        return self

    def rates(self) -> dict[str, float]:
        """``--fx-rate`` as code -> units per USD (:func:`parse_fx_rates`)."""
        return parse_fx_rates(self.fx_rates)

    def display(self) -> Currency:
        """The currency amounts are printed in (:func:`display_currency`)."""
        return display_currency(self.currency, self.rates())
