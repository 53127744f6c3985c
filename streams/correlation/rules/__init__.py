"""One module per correlation rule; :data:`streams.correlation.registry.RULES` lists them."""
