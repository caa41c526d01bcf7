"""fairdp_core: measuring and mitigating the disparity of group privacy risks in DP machine learning."""

from . import config, data, engine, models
from .config import ConfigError, Params, load_params
from .engine import TrainedBank, TrainSpec, train_bank

__version__ = "0.1.0"
__all__ = [
           "ConfigError",
           "Params",
           "TrainSpec",
           "TrainedBank",
           "__version__",
           "config",
           "data",
           "engine",
           "load_params",
           "models",
           "train_bank",
]
