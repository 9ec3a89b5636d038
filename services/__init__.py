"""One package per role; each role is one OS process started by the supervisor."""
