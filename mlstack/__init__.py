from mlstack import kernel as _kernel

_kernel.prepare()  # before any mlstack module imports aws_cdk: the jsii kernel starts with its options
