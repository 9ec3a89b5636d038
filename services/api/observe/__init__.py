"""The routes that only read: health, metrics, state, events, runner views, diagnostics, traces,
the dashboard and its static files."""
