"""HTTP resources: plain classes with on_get/on_post; dependencies injected, no zmq here."""
