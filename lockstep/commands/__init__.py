"""One module per ``lockstep`` command; each exposes ``register(subparsers)``."""
