"""The presenter's scenarios, one module each: its `SCENARIO` row and its truth table rows.

`scenarios` finds every module here (a module whose name starts with `_` is not one), so a
new scenario is a new module and nothing else; they are ordered by their key.
"""
