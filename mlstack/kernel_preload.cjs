// Preloaded into the jsii kernel (the node process aws-cdk-lib runs in) by mlstack/kernel.py: see there for why.
// V8 reads this flag when it compiles a WebAssembly module, so setting it before any module loads is enough.
require("v8").setFlagsFromString("--liftoff-only");
