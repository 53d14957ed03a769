"""The remote tier: where objects live (layout), what is known about them (metadata), and reading them."""
