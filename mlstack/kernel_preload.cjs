// Preloaded into the jsii kernel (the node process aws-cdk-lib runs in) by mlstack/kernel.py: see there for why.
"use strict";

// V8 reads this flag when it compiles a WebAssembly module, so setting it before any module loads is enough.
require("v8").setFlagsFromString("--liftoff-only");

// The kernel in one process instead of two. jsii's Python runtime starts `node bin/jsii-runtime.js`, a relay that
// starts a second node process for the kernel itself (`lib/program.js`, beside it) and copies every request and
// response between its own stdin/stdout and the kernel's file descriptor 3, and the kernel's stdout/stderr to its own
// stderr as `{"stdout"|"stderr": <base64>}` lines. Requests are synchronous, so the relay sits on every round trip:
// it cost about 1.5 s of CPU time (and as much wall time) in a synth of every blueprint, 11k requests. Here the relay
// process loads program.js itself in place of its own code: the kernel's reads and writes of descriptor 3 go to
// stdin and stdout, and its console output goes to stderr in the relay's format, so jsii's Python side sees the same
// protocol. Only when everything checks out; otherwise the relay runs as shipped.
(function kernelInThisProcess() {
  const fs = require("fs");
  const path = require("path");
  const entry = process.argv[1];
  if (!entry || path.basename(entry) !== "jsii-runtime.js" || path.basename(path.dirname(entry)) !== "bin") return;
  const program = path.resolve(path.dirname(entry), "..", "lib", "program.js");
  const API = 3; // the kernel's request/response descriptor (program.js: `new SyncStdio({readFD: 3, writeFD: 3})`)
  // The relay starts the kernel with --preserve-symlinks (mlstack/kernel.py, PRESERVE_SYMLINKS): only when this
  // process resolves modules the same, and then with the flag where the kernel looks for it (its command line).
  const PRESERVE = "--preserve-symlinks";
  const options = (process.env.NODE_OPTIONS || "").split(/\s+/);
  if (!process.execArgv.includes(PRESERVE) && !options.includes(PRESERVE) && process.env.NODE_PRESERVE_SYMLINKS !== "1") {
    return;
  }
  try {
    if (!fs.readFileSync(program, "latin1").includes("readFD:3,writeFD:3")) return;
    // Descriptor 3 must be one no file the kernel opens can get: libuv's event poll, held for the process's life.
    if (fs.readlinkSync(`/proc/self/fd/${API}`) !== "anon_inode:[eventpoll]") return;
  } catch {
    return; // no program.js beside the relay, or no /proc (not Linux): the relay as shipped
  }

  if (!process.execArgv.includes(PRESERVE)) process.execArgv.push(PRESERVE);

  const { readSync, writeSync } = fs;
  const STDIN = 0;
  const STDOUT = 1;
  const STDERR = 2;
  fs.readSync = function (fd, ...rest) {
    return readSync.call(this, fd === API ? STDIN : fd, ...rest);
  };
  fs.writeSync = function (fd, ...rest) {
    return writeSync.call(this, fd === API ? STDOUT : fd, ...rest);
  };

  function writeAll(fd, buffer) {
    for (let offset = 0; offset < buffer.length; ) {
      try {
        offset += writeSync(fd, buffer, offset);
      } catch (err) {
        if (err.code !== "EAGAIN") throw err;
      }
    }
  }

  // stdout carries the protocol, so nothing else may write there: console output goes to stderr as the relay sent
  // it. A child process given process.stdout or process.stderr as its output gets descriptor 2 (the stream's `fd`).
  const { Readable, Writable } = require("stream");
  function relayed(name) {
    const stream = new Writable({
      write(chunk, _encoding, callback) {
        writeAll(STDERR, Buffer.from(`${JSON.stringify({ [name]: chunk.toString("base64") })}\n`));
        callback();
      },
    });
    stream.fd = STDERR;
    return stream;
  }
  const streams = { stdout: relayed("stdout"), stderr: relayed("stderr"), stdin: Readable.from([]) };
  for (const [name, stream] of Object.entries(streams)) {
    Object.defineProperty(process, name, { configurable: true, enumerable: true, get: () => stream });
  }

  const Module = require("module");
  const load = Module._load;
  Module._load = function (request, parent, isMain) {
    if (!isMain) return load.apply(this, arguments);
    Module._load = load;
    return load.call(this, program, parent, isMain);
  };
})();
