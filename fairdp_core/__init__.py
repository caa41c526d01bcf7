"""fairdp_core: measuring and mitigating the disparity of group privacy risks in DP machine learning."""

from . import config, data, engine, models
from .config import ConfigError, Params, load_params
from .engine import TrainedBank, TrainSpec, train_bank

__version__ = "0.1.0"
__all__ = ["config", "data", "engine", "models", "ConfigError", "Params", "TrainSpec", "TrainedBank",
           "load_params", "train_bank", "__version__"]
