"""The generation path: one request from its parsed body to the runner's tokens and back (routing,
resume after a lost instance, metering, the request's trace and its records in the event log)."""
