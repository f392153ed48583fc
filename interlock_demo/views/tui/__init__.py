"""The Textual app a presenter drives."""
