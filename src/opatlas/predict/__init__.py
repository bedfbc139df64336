"""Answer "how long does op X take at shape S on device D", vectorised over many shapes."""

from opatlas.predict.predictor import Predictor

__all__ = ["Predictor"]
