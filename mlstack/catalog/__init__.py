"""Guidance as code: instance catalog, EFA layout, memory model and advisor.

Public API (other packages code against these names)::

    from mlstack.catalog import get_instance, all_instances, InstanceType, Accelerator, efa_layout, EfaInterface
"""

from __future__ import annotations

from mlstack.catalog.efa import EfaInterface, efa_interface_count, efa_layout
from mlstack.catalog.instances import Accelerator, InstanceType, all_instances, get_instance

__all__ = [
    "Accelerator",
    "EfaInterface",
    "InstanceType",
    "all_instances",
    "efa_interface_count",
    "efa_layout",
    "get_instance",
]
