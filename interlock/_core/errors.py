"""Errors raised by interlock.

Every error derives from one root, so a caller can catch the library as a whole::

    InterlockError
    ├── ConfigError (ValueError)             bad timing or switch settings
    ├── IntentError (ValueError)             a decision that cannot be journaled as given
    ├── StoreError                           the journal cannot be used
    │   └── SchemaVersionError               the store was written by another schema
    ├── LeaseError (LookupError)             no such approval, or a bad operation on one
    ├── ActionError (LookupError)            no such action in the journal
    └── PaymentsError                        the payments provider answered badly
        ├── PaymentsUnsettledError           no answer, or one that settles nothing
        ├── PaymentsRejectedError            a definite "no": it was not and will not be done
        └── PaymentsAuthError                the key was refused (401/403): fix the key

Each message says what happened and what to do about it; none carries a secret.
"""

from __future__ import annotations

# What parsing a stored value edited by hand can raise (an amount of 1e999 overflows int):
# each is reported as that row being unreadable, never raised out of a read of the store.
UNREADABLE = (ValueError, LookupError, TypeError, OverflowError, AttributeError)


class InterlockError(Exception):
    """Root of every error the library raises."""


class ConfigError(InterlockError, ValueError):
    """A setting is invalid; the message names the setting, the value and the rule."""


class IntentError(InterlockError, ValueError):
    """A field of an `Intent` breaks its rules; nothing was journaled."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"intent {field}: {problem}; nothing was journaled")


class StoreError(InterlockError):
    """The journal store cannot be opened or written."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"interlock store {path}: {problem}")


class SchemaVersionError(StoreError):
    """The store carries a schema version this library does not read."""

    def __init__(self, path: str, found: int, expected: int) -> None:
        self.found = found
        self.expected = expected
        super().__init__(
            path,
            f"schema version {found}, this library reads version {expected}; "
            "use a new store file or the interlock version that wrote it",
        )


class LeaseError(InterlockError, LookupError):
    """An approval (lease) is missing or cannot be changed as asked."""

    def __init__(self, lease_id: str, message: str) -> None:
        self.lease_id = lease_id
        super().__init__(f"lease {lease_id}: {message}")


class ActionError(InterlockError, LookupError):
    """The journal has no such action, or it cannot be used as asked."""

    def __init__(self, action_id: str, message: str) -> None:
        self.action_id = action_id
        super().__init__(f"action {action_id}: {message}")


class PaymentsError(InterlockError):
    """The payments provider did not do what was asked."""


class PaymentsUnsettledError(PaymentsError):
    """No answer came, or one that settles nothing (timeout, reset, 5xx, 409, 429).

    The request may or may not have taken effect; only a later lookup can tell.
    """

    def __init__(self, operation: str, detail: str, http_status: int | None = None) -> None:
        self.operation = operation
        self.detail = detail
        self.http_status = http_status
        status = f" (HTTP {http_status})" if http_status is not None else ""
        super().__init__(
            f"{operation}: no settled answer{status}: {detail}; "
            "it may or may not have happened: look it up before sending again"
        )


class PaymentsRejectedError(PaymentsError):
    """A definite refusal: the provider says it did not and will not do it."""

    def __init__(
        self,
        operation: str,
        code: str,
        message: str,
        http_status: int | None = None,
        param: str | None = None,
    ) -> None:
        self.operation = operation
        self.code = code
        self.provider_message = message
        self.http_status = http_status
        self.param = param
        super().__init__(f"{operation} refused ({code}): {message}")


class PaymentsAuthError(PaymentsError):
    """The provider refused the key (401/403): a configuration error, never an outcome.

    Nothing about the action is settled by it; fix the key and run recovery again.
    """

    def __init__(self, operation: str, http_status: int, detail: str) -> None:
        self.operation = operation
        self.http_status = http_status
        self.detail = detail
        super().__init__(
            f"{operation}: the payments provider refused the key (HTTP {http_status}): {detail}; "
            "check the key and its permissions, then run recovery again"
        )
