"""Independent models: written from the papers' equations, not from the graph."""
