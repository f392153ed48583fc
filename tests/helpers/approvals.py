"""Test helper: the one approver the tests grant as, and the trust list of its key.

Tests whose gates trust `APPROVERS` grant with `APPROVER.grant(...)` or sign a `Lease`
they build with `APPROVER.sign(...)`, as a person's approval tool would; the key is made
once per test process and never written anywhere.
"""

from __future__ import annotations

from interlock import Approver, Approvers

APPROVER = Approver.generate("support")
APPROVERS = Approvers.of(APPROVER)
