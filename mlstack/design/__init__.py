"""Every decision a blueprint implies, without CDK: config -> design -> stacks, plan."""
