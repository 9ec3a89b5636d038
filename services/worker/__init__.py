"""The worker role: this node's runners and the models they load."""
