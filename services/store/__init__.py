"""store: the node's model files (models dir; staging and serving peers come later)."""
