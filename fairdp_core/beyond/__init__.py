"""Risks beyond membership, per group (docs/study.md, 'Beyond membership'): attribute inference and model inversion
against the study's banks, and the utility of DP-SGD on the DP-SGD material's image models.

- :mod:`.attribute`: the adversary knows a record except one sensitive attribute (the study's group attribute) and
  queries a trained model. Where the attribute is a model input it tries every value and keeps the one with the
  lowest loss (Yeom et al. 2018; Fredrikson et al. 2014); where it is not, a meta-classifier maps the model's
  outputs (and the record's label) to the attribute, fitted on public records (the test split). Success is
  measured on the audit records, separately on members and non-members of each model, so that the leak of the
  training records is told apart from what the model says about the distribution.
- :mod:`.inversion`: class representatives by gradient ascent on a class score with a regulariser (Fredrikson et
  al. 2015), scored by an evaluator trained without privacy on data disjoint from the attacked models'.
"""

from .attribute import (
    AttributeResult,
    attribute_inference_summary,
    lowest_loss_guesses,
    meta_classifier_guesses,
    pair_inference,
)
from .inversion import InversionResult, invert_classes, total_variation

__all__ = ["AttributeResult", "InversionResult", "attribute_inference_summary", "invert_classes", "lowest_loss_guesses",
           "meta_classifier_guesses", "pair_inference", "total_variation"]
