"""Answer "how long does op X take at shape S on device D", vectorised over many shapes."""

from opatlas.predict.predictor import Predictor, check_dtype, check_valid, parse_shape

__all__ = ["Predictor", "check_dtype", "check_valid", "parse_shape"]
