"""store: the node's model files; on the store host, the LAN model store over HTTP."""
