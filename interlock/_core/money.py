"""Amounts in words: an integer in a currency's smallest unit, as a person reads it.

Stripe gives every amount in the currency's smallest unit: cents for `usd` and `eur`,
whole yen for `jpy` (a zero-decimal currency: 2000 is ¥2,000), thousandths for `kwd` (a
three-decimal one: 2000 is KWD 2.000). `format_amount` is the one place that turns such
an amount into words, for the model and for a person; every guard's words and the demo's
screen call it with the action's currency.
"""

from __future__ import annotations

import re

ZERO_DECIMAL = frozenset(
    [
        "bif",
        "clp",
        "djf",
        "gnf",
        "jpy",
        "kmf",
        "krw",
        "mga",
        "pyg",
        "rwf",
        "ugx",
        "vnd",
        "vuv",
        "xaf",
        "xof",
        "xpf",
    ]
)
"""Stripe's zero-decimal currencies: the amount is in whole units."""
THREE_DECIMAL = frozenset(["bhd", "jod", "kwd", "omr", "tnd"])
"""Stripe's three-decimal currencies: the amount is in thousandths."""
SYMBOLS = {"usd": "$", "eur": "€", "gbp": "£", "jpy": "¥"}
"""Symbols written before the amount; any other currency is written as its code."""

_CODE = re.compile(r"[a-z]{3}")


def currency_problem(value: object) -> str | None:
    """Why `value` is not a lowercase ISO 4217 code (such as `usd`), or None when it is."""
    if isinstance(value, str) and _CODE.fullmatch(value):
        return None
    problem = f"must be a lowercase ISO 4217 code such as 'usd', got {value!r}"
    if isinstance(value, str) and _CODE.fullmatch(value.lower()):
        problem += f": use {value.lower()!r}"
    return problem


def decimals(currency: str) -> int:
    """How many digits of an amount in `currency` are after the decimal point."""
    code = currency.lower()
    if code in ZERO_DECIMAL:
        return 0
    return 3 if code in THREE_DECIMAL else 2


def format_amount(amount: int, currency: str | None, *, trim: bool = False) -> str:
    """`amount` (in `currency`'s smallest unit) as words: `$20.00`, `€20.00`, `¥2,000`,
    `KWD 2.000`, `CHF 20.00`; with `trim`, a whole amount without its zeros (`$20`), for a
    narrow screen.

    With no currency (an action journaled before intents recorded theirs), the amount is
    given as it is, in the smallest unit, and said to be so: never guessed as dollars.
    """
    if currency is None:
        return f"{amount:,} in the smallest unit of its currency (not recorded)"
    code = currency.lower()
    places = decimals(code)
    sign, whole = ("-", -amount) if amount < 0 else ("", amount)
    if places:
        units, minor = divmod(whole, 10**places)
        number = f"{units:,}" if trim and not minor else f"{units:,}.{minor:0{places}d}"
    else:
        number = f"{whole:,}"
    symbol = SYMBOLS.get(code)
    return f"{sign}{symbol}{number}" if symbol else f"{sign}{code.upper()} {number}"
