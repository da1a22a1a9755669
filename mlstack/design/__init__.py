"""Every decision a blueprint implies, without the CDK: config -> design -> stacks and plan."""
