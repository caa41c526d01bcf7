"""fairdp_core: measuring and mitigating the disparity of group privacy risks in DP machine learning."""

from . import config, data
from .config import ConfigError, Params, load_params

__version__ = "0.1.0"
__all__ = ["config", "data", "ConfigError", "Params", "load_params", "__version__"]
