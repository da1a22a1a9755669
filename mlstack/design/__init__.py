"""The decisions a blueprint implies, without the CDK: `config` validates a blueprint, `design` says what it
becomes, `stacks` map that onto construct props and `plan` prices and explains it.

Nothing here imports `aws_cdk` (tests/test_structure.py holds it), so `mlstack plan` never starts jsii/Node.
"""
