"""The gate and what it rests on: the journal, claims, leases, receipts, events, errors,
config, approvals, money, signals, the effects it sends through, verify and the crash points."""
