"""The demo's scenarios and the truth table, as data."""
