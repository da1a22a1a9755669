// Preloaded into the jsii kernel (the node process aws-cdk-lib runs in) by mlstack/kernel.py: see there for why.
// V8 reads this flag when it compiles a WebAssembly module, so setting it before any module loads is enough.
require("v8").setFlagsFromString("--liftoff-only");
// Node's on-disk compile cache (Node 22.1+; NODE_COMPILE_CACHE or the OS temp folder): aws-cdk-lib's JavaScript
// is compiled once per version, not on every synth. Older Node has no such function and compiles as before.
const mod = require("module");
if (typeof mod.enableCompileCache === "function") {
  mod.enableCompileCache();
}
