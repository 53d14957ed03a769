"""Tierkeeper storage core: Kafka log formats, tiering decisions and remote-tier I/O.

Its packages are layered, and nothing imports upward: the one statement of the layers is the layers
contract of ``.importlinter`` (checked by ``make lint``), quoted and explained in storage_core/DESIGN.md,
"Layers"; each package's docstring names its layer.
"""

__version__ = "0.1.0"
