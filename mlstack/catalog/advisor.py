"""Advisor: rank instance type x node count for a training or inference task, offline, from the catalog.

Every option says why it was chosen or cut. Training lives in `mlstack.catalog.train_advisor` (TP x PP x DP
layouts, utilisation from published runs, dated prices), inference in `mlstack.catalog.infer_advisor` (TP degree x
replicas, serving estimate, $ per million output tokens); this module re-exports the whole API.
"""

from __future__ import annotations

from mlstack.catalog.advice import Advice, Option, node_counts
from mlstack.catalog.infer_advisor import advise_infer
from mlstack.catalog.train_advisor import TRAIN_PRECISIONS, TrainingMemory, advise_train, training_memory

__all__ = [
    "TRAIN_PRECISIONS",
    "Advice",
    "Option",
    "TrainingMemory",
    "advise_infer",
    "advise_train",
    "node_counts",
    "training_memory",
]
