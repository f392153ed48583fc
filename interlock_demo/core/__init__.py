"""The run model and its rules: what a run is and how a column is judged.

Nothing here imports Textual or starts a process.
"""
