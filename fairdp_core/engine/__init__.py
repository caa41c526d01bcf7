"""The batched trainer: sampling, noise and accounting; banks sharded over worker processes or Ray tasks.

The clipping policies (the one seam in which the rules differ) live with the rules: the seam in
``fairdp_core/rules/policy.py``, each adaptive rule's policy in its rule's module; they are re-exported here for the
engine's users."""

from ..rules.adaclip import AdaClip
from ..rules.dpsgd_f import DPSGDFClip
from ..rules.dpsgd_s import GroupQuantileClip
from ..rules.dpsgd_s_nonprivate import GroupEMAPercentileClip
from ..rules.dpsgd_s_paper import GroupMeanRatioClip
from ..rules.dpsgd_s_paper_code import GroupMeanRatioClipCode
from ..rules.global_adapt import GlobalAdaptClip
from ..rules.policy import FixedClip, NoClip, clip_factors, quantile_update
from .accounting import Accounting, bank_accounting, calibrate_sigma, combine_sigmas, epsilon, split_sigma
from .backends import DenseBackend, FuncBackend, make_backend, stack_params
from .sampling import PoissonBank, batch_sizes, bernoulli_positions
from .shard import ShardError, concat_banks, shard_rows, train_bank_sharded
from .spec import TrainSpec, release_key
from .trainer import ALGORITHMS, EpochView, TrainedBank, bank_widths, model_generators, train_bank

__all__ = [
    "ALGORITHMS",
    "Accounting",
    "AdaClip",
    "DPSGDFClip",
    "DenseBackend",
    "EpochView",
    "FixedClip",
    "FuncBackend",
    "GlobalAdaptClip",
    "GroupEMAPercentileClip",
    "GroupMeanRatioClip",
    "GroupMeanRatioClipCode",
    "GroupQuantileClip",
    "NoClip",
    "PoissonBank",
    "ShardError",
    "TrainSpec",
    "TrainedBank",
    "bank_accounting",
    "bank_widths",
    "batch_sizes",
    "bernoulli_positions",
    "calibrate_sigma",
    "clip_factors",
    "concat_banks",
    "combine_sigmas",
    "epsilon",
    "make_backend",
    "model_generators",
    "quantile_update",
    "release_key",
    "shard_rows",
    "split_sigma",
    "stack_params",
    "train_bank",
    "train_bank_sharded",
]
