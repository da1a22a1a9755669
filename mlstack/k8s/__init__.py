"""Kubernetes-facing rendering, no CDK import: node facts (taints, labels, AMI type) and the example training job.

The training constructs label and taint nodes with these values and the plan renders the job from them, so both
sides agree by construction.
"""
