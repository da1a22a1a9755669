"""Calls `mlstack access` finds denied on the shipped templates, each with the issue item whose fix removes it.

`test_access.py` fails on a denial that is not listed here AND on a listed one that no longer happens. The first run
(issue 22) listed 55 denials in mlops-pipeline (27), mlops-efa-training (25) and hyperpod-slurm-training (2):
volume-key grants, S3Prefix listing, the pipeline's JsonGet read, malformed log-group ARNs, the HyperPod
lifecycle-prefix listing and ec2:DetachNetworkInterface on the instance. All were fixed in their layers; a new
entry needs the issue that will fix it.
"""

from __future__ import annotations

# blueprint -> {(principal, action, resource, issue item)}
KNOWN_DENIED: dict[str, set[tuple[str, str, str, str]]] = {}
