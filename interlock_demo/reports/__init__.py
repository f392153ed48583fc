"""Commands that run many scenarios and write reports: sweeps, results/, screenshots, benchmarks."""
