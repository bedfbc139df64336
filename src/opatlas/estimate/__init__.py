"""Training-step estimation: compose op and collective predictions into the time of one
optimizer step of an LLM under data, tensor and pipeline parallelism, with memory."""

from opatlas.estimate.config import TrainConfig, load_config
from opatlas.estimate.engine import Estimate, estimate_many, estimate_step
from opatlas.estimate.search import search

__all__ = ["Estimate", "TrainConfig", "estimate_many", "estimate_step", "load_config", "search"]
