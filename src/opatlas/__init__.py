"""opatlas: how fast tensor operators and training steps run on accelerators, and why.

The Python API is the product; the ``opatlas`` command is a thin layer over it.
Stages (one subpackage each): spec -> sweep -> run -> store -> fit -> predict -> estimate,
with bounds and analyze alongside. See the README for a tour.
"""

__version__ = "0.1.0"
