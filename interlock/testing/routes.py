"""The Stripe endpoints the emulator models: one row each, and the checks of their parameters.

Each `Route` says what the HTTP face routes (method and path), which operation of
`PaymentsModel` answers it, which parameters it accepts (and for a hash the names inside
it) with the check each one passes, the stripe SDK's params TypedDict it is held to, and
whether faults apply to it. The emulator routes by `route_for`; the model checks a
request by `Route.parse` and calls the row's operation. A new object is a row here and an
operation there.

Requests are checked as strictly as Stripe checks them, before anything else, in the order
of the row's parameters: a parameter the row does not list is refused (in words when Stripe
knows it and the emulator does not model it, never silently ignored); metadata limits,
amount and currency rules are Stripe's. tests/loopback/test_emulator_strict.py holds the
rows against the SDK's TypedDicts (`SDK_PARAMS`), so offline cannot accept what live
refuses. Checks that need the model's state (does the payment exist, can it be refunded)
are the operation's.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

JSONObj = dict[str, Any]

METADATA_MAX_KEYS = 50
METADATA_KEY_MAX = 40
METADATA_VALUE_MAX = 500
# Stripe's largest amount for a charge, in the smallest unit (eight digits).
AMOUNT_MAX = 99_999_999
# Currencies the emulator models: symbol, decimals, minimum charge in the smallest unit.
CURRENCIES: dict[str, tuple[str, int, int]] = {
    "aud": ("$", 2, 50),
    "cad": ("$", 2, 50),
    "eur": ("€", 2, 50),
    "gbp": ("£", 2, 30),
    "jpy": ("¥", 0, 50),
    "usd": ("$", 2, 50),
}
_INTEGER = re.compile(r"-?[0-9]+")


class StripeModelError(Exception):
    """An answer in Stripe's error envelope.

    `saved` says whether the idempotency layer keeps it: Stripe saves results only once
    an endpoint began executing, so a validation error is not saved.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        saved: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.saved = saved

    def envelope(self) -> JSONObj:
        """The JSON body Stripe answers with."""
        error: JSONObj = {"type": self.type, "message": self.message}
        if self.code is not None:
            error["code"] = self.code
        if self.param is not None:
            error["param"] = self.param
        return {"error": error}


def missing(kind: str, object_id: str, *, param: str) -> StripeModelError:
    """Stripe's 404 for an id that names nothing."""
    return StripeModelError(
        404, f"No such {kind}: '{object_id}'", code="resource_missing", param=param
    )


# -- checks: each reads one parameter from the request and returns its value -------------

Check = Callable[[Mapping[str, Any], str], Any]


def required(p: Mapping[str, Any], name: str) -> None:
    """Refuse a request without `name` (or with it empty)."""
    if p.get(name) is None or p.get(name) == "":
        raise StripeModelError(
            400, f"Missing required param: {name}.", code="parameter_missing", param=name
        )


def string(p: Mapping[str, Any], name: str) -> str:
    """A parameter that must be a string."""
    value = p.get(name)
    if not isinstance(value, str):
        raise StripeModelError(
            400, f"Invalid string: {value!r}", code="parameter_invalid_string", param=name
        )
    return value


def optional(check: Check) -> Check:
    """`check` when the parameter is given, else None."""

    def checked(p: Mapping[str, Any], name: str) -> Any:
        return check(p, name) if name in p else None

    return checked


def amount(p: Mapping[str, Any], name: str) -> int:
    """A positive integer in ASCII digits, as Stripe reads amounts."""
    required(p, name)
    text = str(p[name])
    # ASCII digits only, as Stripe reads them: int() alone takes "٣٠٠" and "５０", and
    # str.isdigit() passes "²", which int() then refuses.
    if isinstance(p[name], bool) or _INTEGER.fullmatch(text) is None:
        raise StripeModelError(
            400, f"Invalid integer: {text[:100]}", code="parameter_invalid_integer", param=name
        )
    value = int(text)
    if value < 1:
        raise StripeModelError(
            400,
            "This value must be greater than or equal to 1.",
            code="parameter_invalid_integer",
            param=name,
        )
    return value


def currency(p: Mapping[str, Any], name: str) -> str:
    """A currency the emulator models, lower-cased."""
    required(p, name)
    raw = str(p[name])
    if raw.lower() not in CURRENCIES:
        raise StripeModelError(
            400,
            f"Invalid currency: {raw[:20]}. The emulator models "
            f"{', '.join(CURRENCIES)} (Stripe supports more).",
            code="parameter_invalid_string",
            param=name,
        )
    return raw.lower()


def charge_amount(p: Mapping[str, Any], name: str) -> int:
    """An amount a charge may have in the request's currency (checked first, as Stripe does)."""
    value, code = amount(p, name), currency(p, "currency")
    minimum = CURRENCIES[code][2]
    if value < minimum:
        raise StripeModelError(
            400,
            f"Amount must be at least {money(minimum, code)} {code}",
            code="amount_too_small",
            param=name,
        )
    if value > AMOUNT_MAX:
        raise StripeModelError(
            400,
            f"Amount must be no more than {money(AMOUNT_MAX, code)}",
            code="amount_too_large",
            param=name,
        )
    return value


def money(value: int, code: str) -> str:
    """An amount as Stripe words it in its messages: `$1,234.56`, `¥2,000`."""
    symbol, decimals, _ = CURRENCIES[code]
    if decimals == 0:
        return f"{symbol}{value:,}"
    return f"{symbol}{value // 100:,}.{value % 100:02d}"


def boolean(p: Mapping[str, Any], name: str) -> bool:
    """`true` or `false` (false when absent)."""
    raw = p.get(name, False)
    if isinstance(raw, bool):
        return raw
    if raw in ("true", "false"):
        return bool(raw == "true")
    raise StripeModelError(
        400, f"Invalid boolean: {str(raw)[:100]}", code="parameter_invalid_boolean", param=name
    )


def one_of(*choices: str) -> Check:
    """An optional parameter that must be one of `choices`."""
    words = ", ".join(choices[:-1]) + f", or {choices[-1]}"

    def checked(p: Mapping[str, Any], name: str) -> Any:
        value = p.get(name)
        if value is not None and value not in choices:
            raise StripeModelError(400, f"Invalid {name}: must be one of {words}", param=name)
        return value

    return checked


def metadata(p: Mapping[str, Any], name: str) -> dict[str, str]:
    """String keys and values within Stripe's limits; an empty value unsets its key."""
    raw = p.get(name, {})
    if raw == "":
        return {}
    if not isinstance(raw, dict):
        raise StripeModelError(400, "Invalid object", code="parameter_invalid_object", param=name)
    kept: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise StripeModelError(
                400,
                f"Invalid metadata[{key}]: metadata keys and values must be strings",
                param=name,
            )
        if "[" in key or "]" in key:
            raise StripeModelError(
                400, "Metadata keys can't contain square brackets ([ or ]).", param=name
            )
        if len(key) > METADATA_KEY_MAX:
            raise StripeModelError(
                400,
                f"Metadata keys can have up to {METADATA_KEY_MAX} characters, but you passed "
                f"in a key that is {len(key)} characters. Invalid key: {key[:100]}",
                param=name,
            )
        if len(value) > METADATA_VALUE_MAX:
            raise StripeModelError(
                400,
                f"Metadata values can have up to {METADATA_VALUE_MAX} characters, but you "
                f"passed in a value that is {len(value)} characters.",
                param=name,
            )
        if value != "":
            kept[key] = value
    if len(kept) > METADATA_MAX_KEYS:
        raise StripeModelError(
            400,
            f"Metadata can have up to {METADATA_MAX_KEYS} keys, but you've set {len(kept)}.",
            param=name,
        )
    return kept


def created_bounds(p: Mapping[str, Any], name: str) -> dict[str, int]:
    """A list's `created` filter (`created[gte]=...`) as integer bounds (an empty value is
    no filter; `Route.parse` already refused any other shape)."""
    raw = p.get(name)
    if not isinstance(raw, dict):
        return {}
    bounds: dict[str, int] = {}
    for op, value in raw.items():
        text = str(value)
        if _INTEGER.fullmatch(text) is None:
            raise StripeModelError(
                400,
                f"Invalid integer: {text[:100]}",
                code="parameter_invalid_integer",
                param=f"{name}[{op}]",
            )
        bounds[op] = int(text)
    return bounds


def limit(p: Mapping[str, Any], name: str) -> int:
    """A page size from 1 to 100 (10 when absent)."""
    raw = str(p.get(name, "10"))
    size = int(raw) if _INTEGER.fullmatch(raw) else -1
    if not 1 <= size <= 100:
        raise StripeModelError(
            400, "Invalid limit: must be an integer between 1 and 100.", param=name
        )
    return size


def payment_methods(p: Mapping[str, Any], name: str) -> tuple[list[str], JSONObj | None]:
    """An intent's payment_method_types and automatic_payment_methods, read together from
    `allowed_payment_method_types` and `automatic_payment_methods` (`name`)."""
    allowed, automatic = p.get("allowed_payment_method_types"), p.get(name)
    if allowed is not None and automatic is not None:
        raise StripeModelError(
            400,
            f"You may only specify one of these parameters: allowed_payment_method_types, {name}.",
            param="allowed_payment_method_types",
        )
    if automatic is not None:
        enabled = boolean(automatic, "enabled")
        redirects = automatic.get("allow_redirects", "always")
        if redirects not in ("always", "never"):
            raise StripeModelError(
                400,
                f"Invalid {name}[allow_redirects]: must be one of always or never",
                param=f"{name}[allow_redirects]",
            )
        return ["card"], {"allow_redirects": redirects, "enabled": enabled}
    if allowed is None:
        return ["card"], None
    if not isinstance(allowed, list) or not all(isinstance(t, str) and t for t in allowed):
        raise StripeModelError(
            400,
            "Invalid array",
            code="parameter_invalid_array",
            param="allowed_payment_method_types",
        )
    return list(allowed), None


def refund_target(p: Mapping[str, Any], name: str) -> str:
    """The payment a refund is for: Stripe asks for it (or a charge) in its own words."""
    if not p.get(name):
        raise StripeModelError(
            400,
            "One of the following params should be provided for this request: "
            "payment_intent or charge.",
            code="parameter_missing",
        )
    return string(p, name)


def required_string(p: Mapping[str, Any], name: str) -> str:
    """A string that must be given (anything empty counts as not given)."""
    if not p.get(name):
        raise StripeModelError(
            400, f"Missing required param: {name}.", code="parameter_missing", param=name
        )
    return string(p, name)


# -- the table ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """One parameter a route accepts: its check (None: taken as given) and, for a hash,
    the names it may hold (empty: any, as metadata's)."""

    check: Check | None = None
    inner: frozenset[str] = frozenset()


_CREATED = Param(created_bounds, frozenset({"gt", "gte", "lt", "lte"}))


@dataclass(frozen=True)
class Route:
    """One endpoint: see the module docstring.

    `operation` is the `PaymentsModel` method that answers it, called with the path's id
    (empty for none) and the checked parameters. `faults_on` names the parameter (or
    `id`, the path's) holding the payment a fault may be limited to; faults apply to a
    route only when it is set (create faults to a POST, read faults to a GET). `retired`
    maps a parameter Stripe no longer takes to its code and words.
    """

    method: str
    path: str
    operation: str
    params: Mapping[str, Param]
    sdk: tuple[str, str]
    faults_on: str | None = None
    retired: Mapping[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def endpoint(self) -> str:
        """`METHOD /path`, as Stripe's docs name it and `ROUTES` is keyed."""
        return f"{self.method} {self.path}"

    @property
    def resource(self) -> str:
        """The collection it serves (`refunds`), as `PaymentsModel.requests` records it."""
        return self.path.split("/")[2]

    def parse(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The checked parameters, by name, in the row's order; `StripeModelError` for the
        first one Stripe would refuse."""
        for name, value in params.items():
            if name not in self.params:
                raise self._unaccepted(name)
            inner = self.params[name].inner
            if inner and value != "":
                if not isinstance(value, dict):
                    raise StripeModelError(
                        400, "Invalid object", code="parameter_invalid_object", param=name
                    )
                for key in value:
                    if key not in inner:
                        raise self._unaccepted(f"{name}[{key}]")
        return {
            name: params.get(name) if param.check is None else param.check(params, name)
            for name, param in self.params.items()
        }

    def _unaccepted(self, name: str) -> StripeModelError:
        if name in self.retired:
            code, words = self.retired[name]
            return StripeModelError(400, words, code=code, param=name)
        if "[" not in name and name in sdk_params(self.endpoint):
            return StripeModelError(
                400,
                f"The emulator does not model parameter {name} ({self.endpoint}), which "
                "Stripe accepts: leave it out offline, or add it to its row in "
                "interlock/testing/routes.py.",
                code="parameter_unknown",
                param=name,
            )
        return StripeModelError(
            400, f"Received unknown parameter: {name}", code="parameter_unknown", param=name
        )


def _routes(*rows: Route) -> dict[str, Route]:
    return {row.endpoint: row for row in rows}


ROUTES = _routes(
    Route(
        "POST",
        "/v1/payment_intents",
        "_create_payment_intent",
        {
            "amount": Param(charge_amount),
            "currency": Param(currency),
            "metadata": Param(metadata),
            "description": Param(optional(string)),
            "payment_method": Param(optional(string)),
            "confirm": Param(boolean),
            "allowed_payment_method_types": Param(),
            "automatic_payment_methods": Param(
                payment_methods, frozenset({"enabled", "allow_redirects"})
            ),
        },
        ("stripe.params", "PaymentIntentCreateParams"),
        # Stripe removed it as a writable parameter (API 2026-09-30.endive, the SDK's).
        retired={
            "payment_method_types": (
                "payment_method_types_no_longer_supported",
                "payment_method_types is no longer supported on this API version. Use "
                "allowed_payment_method_types or excluded_payment_method_types, or dynamic "
                "payment methods.",
            )
        },
    ),
    Route(
        "GET",
        "/v1/payment_intents/{id}",
        "_get_payment_intent",
        {},
        ("stripe.params", "PaymentIntentRetrieveParams"),
        faults_on="id",
    ),
    Route(
        "POST",
        "/v1/refunds",
        "_create_refund",
        {
            "payment_intent": Param(refund_target),
            "amount": Param(optional(amount)),
            "metadata": Param(metadata),
            "reason": Param(one_of("duplicate", "fraudulent", "requested_by_customer")),
        },
        ("stripe.params", "RefundCreateParams"),
        faults_on="payment_intent",
    ),
    Route(
        "GET",
        "/v1/refunds",
        "_list_refunds",
        {
            "payment_intent": Param(optional(string)),
            "starting_after": Param(optional(string)),
            "ending_before": Param(optional(string)),
            "created": _CREATED,
            "limit": Param(limit),
        },
        ("stripe.params", "RefundListParams"),
        faults_on="payment_intent",
    ),
    Route(
        "POST",
        "/v1/transfers",
        "_create_transfer",
        {
            "amount": Param(amount),
            "currency": Param(currency),
            "destination": Param(required_string),
            "metadata": Param(metadata),
            "description": Param(optional(string)),
        },
        ("stripe.params", "TransferCreateParams"),
    ),
    Route(
        "GET",
        "/v1/transfers",
        "_list_transfers",
        {
            "destination": Param(optional(string)),
            "starting_after": Param(optional(string)),
            "ending_before": Param(optional(string)),
            "created": _CREATED,
            "limit": Param(limit),
        },
        ("stripe.params", "TransferListParams"),
    ),
    # Payouts from the platform's balance to one of its bank accounts, named (`ba_...`):
    # the emulator has no default account to pay out to.
    Route(
        "POST",
        "/v1/payouts",
        "_create_payout",
        {
            "amount": Param(amount),
            "currency": Param(currency),
            "destination": Param(required_string),
            "metadata": Param(metadata),
            "description": Param(optional(string)),
        },
        ("stripe.params", "PayoutCreateParams"),
    ),
    Route(
        "GET",
        "/v1/payouts",
        "_list_payouts",
        {
            "destination": Param(optional(string)),
            "starting_after": Param(optional(string)),
            "ending_before": Param(optional(string)),
            "created": _CREATED,
            "limit": Param(limit),
        },
        ("stripe.params", "PayoutListParams"),
    ),
)
"""Every endpoint the emulator models, keyed `METHOD /path`."""

# What each endpoint accepts, and the SDK's TypedDict it is held to: views of the table.
ACCEPTED_PARAMS = {
    key: {name: param.inner for name, param in route.params.items()}
    for key, route in ROUTES.items()
}
SDK_PARAMS = {key: route.sdk for key, route in ROUTES.items()}


def route_for(method: str, path: str) -> tuple[Route, str]:
    """The route a request's method and path name, and the path's id ('' for none), or
    Stripe's 404. Slashes around the path are ignored, as before."""
    parts = path.strip("/").split("/")
    for route in ROUTES.values():
        pattern = route.path.strip("/").split("/")
        if route.method != method or len(pattern) != len(parts):
            continue
        if all(p == q or p == "{id}" for p, q in zip(pattern, parts, strict=True)):
            ident = parts[pattern.index("{id}")] if "{id}" in pattern else ""
            return route, ident
    raise StripeModelError(404, f"Unrecognized request URL ({method}: {path}).")


def sdk_params(endpoint: str) -> frozenset[str]:
    """The parameters the installed stripe SDK lists for `endpoint` (request options aside)."""
    from stripe import RequestOptions

    module, name = SDK_PARAMS[endpoint]
    typed = getattr(importlib.import_module(module), name)
    keys: frozenset[str] = typed.__required_keys__ | typed.__optional_keys__
    return keys - (RequestOptions.__required_keys__ | RequestOptions.__optional_keys__)
