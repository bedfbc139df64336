"""Tenstorrent Wormhole reshard: the seed's sweep, a transfer-plan simulator, and the ttnn
backend."""
