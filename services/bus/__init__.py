"""bus: the node-local XSUB/XPUB proxy, with a capture PUB for the tap (zguide Espresso)."""
