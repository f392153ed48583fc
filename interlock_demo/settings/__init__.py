"""The demo's settings, by what they are; each module holds one kind and its rule.

- `modes`: the modes (live, offline, mock), one row each, and the engines.
- `config`: the user's choices for a run (`resolve` checks them into a `DemoConfig`).
- `keys`: the user's Stripe and Anthropic keys, where they are found, and the test-key rule.
- `timing`: the demo's timing defaults and its ceiling on the claim.
- `paths`: `INTERLOCK_HOME` and what a run keeps under it.
- `private`: files under `INTERLOCK_HOME` are the user's alone (0700 folders, 0600 files).
- `approver`: support's approval key, made once under `INTERLOCK_HOME`.
- `environment`: what a child process gets of our environment, one allow-list for all.
- `worker`: one worker launch's environment, built on that allow-list.
"""
