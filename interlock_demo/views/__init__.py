"""The views of a run: the terminal app, the headless printer, the loopback HTTP API
and the browser mirror."""
