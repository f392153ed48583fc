"""The scale tier: unit tests in all but their seconds, each working at a scale a unit
test would not: a store or a model grown to thousands of rows, to show that a cost (time,
memory, a query plan) stays flat as it grows, or the gate's properties over hundreds of
generated stories each.

They are apart so that `pytest tests/unit` stays quick; the default `pytest` runs them.
Like unit tests they start no process and bind no socket, held to that by the unit tier's
guard.
"""

from tests.unit.conftest import (  # noqa: F401 (pytest finds the hooks by name)
    pytest_runtest_call,
    pytest_runtest_setup,
    pytest_runtest_teardown,
)
