"""Worker processes: one entry module per worker kind."""
