// Preloaded into the jsii kernel (the node process aws-cdk-lib runs in) by mlstack/kernel.py: see there for why.
// V8 reads this flag when it compiles a WebAssembly module, so setting it before any module loads is enough.
require("v8").setFlagsFromString("--liftoff-only");

// A kernel started without jsii's relay (mlstack/kernel_start.py) misses the relay's end-of-life notice for old
// Node versions: the start names the oldest Node mlstack is tested on, and this says so once, in this process only
// (taken out of the environment its children inherit).
const oldest = process.env.MLSTACK_NODE_OLDEST;
delete process.env.MLSTACK_NODE_OLDEST;
const major = process.versions.node.split(".")[0];
// jsii's own way to silence its notice for a major version (a comma-separated list) silences this one too.
const silenced = (process.env.JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION || "").split(",").map((v) => v.trim());
if (oldest && Number(major) < Number(oldest) && !silenced.includes(major)) {
  process.stderr.write(
    `mlstack: Node ${process.versions.node} is older than Node ${oldest}, the oldest mlstack is tested on, and jsii ` +
      `may no longer support it: put Node ${oldest} or later first on PATH (make install brings one to ` +
      `node_modules/.bin)\n`,
  );
}
