"""`mlstack plan`: what a blueprint creates, what it costs per hour and month, which quotas it needs.

Computed from the validated blueprint alone: no synth, no AWS call, and no `aws_cdk` import anywhere in this
package (so `mlstack plan` answers without starting jsii/Node). One module per layer adds its part to the data
model in `model` with a `plan_<layer>(config, plan)` function: `network`, `training` (EKS), `training_engines`
(HyperPod and Batch), `inference`, `mlops`, `ai_services`. `build` calls them and `render` prints the result.
Prices carry their date and source, and unknown prices stay unknown.
"""

from __future__ import annotations

from mlstack.plan.build import build_plan
from mlstack.plan.model import HOURS_PER_MONTH, Cost, Plan, Quota, Resource
from mlstack.plan.render import render

__all__ = ["HOURS_PER_MONTH", "Cost", "Plan", "Quota", "Resource", "build_plan", "render"]
