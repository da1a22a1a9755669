// The template-validation worker (mlstack/validation_workers.py starts it): the WebAssembly engine that
// aws-cdk-lib's CloudFormationValidatePlugin runs, @aws/cloudformation-validate, in a process of its own.
// argv[2]: the folder of that package, read out of the installed aws-cdk-lib (never a copy of another version);
// argv[3]: the options CDK's plugin passes to validateTemplate, as JSON (the pseudo parameters come per stack).
// First line out, once the engine is made (about 0.6 s): {version, ruleIds}, what CDK's plugin reports as its
// version and rule IDs (CDKMetadata's analytics), the rule IDs computed as its `ruleIds` getter does.
// Then, per line in: a JSON list of {templatePath, accountId, region} (CDK's PolicyValidationStack); per line out:
// a JSON list (same order) of each template's diagnostics, with the fields CDK's plugin reads, or {error} when
// the engine fails on a template (CDK's plugin would throw: the caller raises).
// Or {expect: [stacks]}, sent before the synth: the worker validates each of those templates as soon as the synth
// has written it (the engine's input is the file's bytes, kept), while the kernel goes on with the rest of the
// synth; the list request after it gets those diagnostics for each template whose bytes are still the same, and
// validates the others then. Reply: {expecting: n}. {stats: true} -> {early, hits, misses} since the last expect,
// and {expecting}: the templates still looked for.
'use strict'
const fs = require('node:fs')
const path = require('node:path')
const readline = require('node:readline')
const { Console } = require('node:console')

// stdout carries only the replies: anything a library logs goes to stderr.
globalThis.console = new Console({ stdout: process.stderr, stderr: process.stderr })
const reply = (value) => process.stdout.write(JSON.stringify(value) + '\n')

const validate = require(path.resolve(process.argv[2]))
const options = JSON.parse(process.argv[3])
const engine = new validate.CompositeEngine({})
const ignored = new Set(options.exclude.ids)
reply({
  version: validate.version(),
  ruleIds: engine
    .listRules()
    .filter((r) => !ignored.has(r.id) && r.severity !== 'INFO' && r.severity !== 'DEBUG')
    .map((r) => r.id),
})

// The file's bytes, labelled with its path: what TemplateFile(path) gives the engine, read once here so that a
// result can be kept against exactly the bytes it is for.
function diagnostics(stack, bytes) {
  const report = engine.validateTemplate(new validate.TemplateContent(bytes, stack.templatePath), {
    ...options,
    pseudoParameterOverrides: { accountId: stack.accountId ?? undefined, region: stack.region ?? undefined },
  })
  return report.diagnostics.map((d) => ({
    ruleId: d.ruleId,
    severity: d.severity,
    message: d.message,
    propertyPath: d.propertyPath ?? null,
    suggestedFix: d.suggestedFix ?? null,
    category: d.category ?? null,
    logicalId: d.entity?.entityType === 'Resource' ? d.entity.logicalId : null,
  }))
}

// Early validation. Templates are written one stack after another during the synth (each blueprint's stage
// first, then the root's), and CDK calls the validation plugins only once all are written and cdk-nag has run:
// validated as they appear, the engine's work overlaps the kernel's instead of following it.
// Every 20 ms: a look is one stat (and a read once a file has changed) per template still expected, well under a
// millisecond for 46; at 20 ms a template waits at most about one 30 ms validation longer than it must.
const POLL_MS = 20
const EXPECT_FOR_MS = 10 * 60 * 1000 // a synth that failed before writing them: stop looking
// {stack, before, seen}: the templates not validated early yet, their file's stamp when expected and when last read
let expected = []
let early = new Map() // stack key -> {bytes, diagnostics}
let generation = 0
let deadline = 0
let stats = { early: 0, hits: 0, misses: 0 }
const keyOf = (stack) => JSON.stringify([stack.templatePath, stack.accountId ?? null, stack.region ?? null])

// What identifies one write of a file: a rewrite changes its modification or change time (or its inode, if
// replaced). null: no file there.
function stamp(templatePath) {
  let s
  try {
    s = fs.statSync(templatePath, { bigint: true, throwIfNoEntry: false })
  } catch {
    return null // not a path a file can be at (a parent is a file): never written, validated when asked
  }
  return s === undefined ? null : `${s.ino}:${s.size}:${s.mtimeNs}:${s.ctimeNs}`
}

// A template the synth has finished writing (until then the file is missing, empty or cut short, and not JSON).
// A file already there when the synth started is an earlier synth's: the CDK CLI writes over an existing cdk.out
// without clearing it, so it counts only once it has been written again. (A rewrite within the same clock tick as
// the first look, same size, is missed: that template is validated when CDK asks.)
// A look is a stat: 400 looks at 46 missing files (an 8 s synth) took 16 ms of CPU, failed reads 118 ms. The file
// is read once per stamp, so one cut short is read again only once it has grown.
function written(entry) {
  const now = stamp(entry.stack.templatePath)
  if (now === null || now === entry.before || now === entry.seen) return null
  entry.seen = now
  let bytes
  try {
    bytes = fs.readFileSync(entry.stack.templatePath)
    JSON.parse(bytes.toString('utf8'))
  } catch {
    return null
  }
  return bytes
}

// One template per turn of the event loop, so that a request that comes in meanwhile is read next.
function poll(mine) {
  if (mine !== generation) return
  if (expected.length === 0 || Date.now() > deadline) {
    expected = []
    return
  }
  for (let i = 0; i < expected.length; i++) {
    const bytes = written(expected[i])
    if (bytes === null) continue
    const [{ stack }] = expected.splice(i, 1)
    try {
      early.set(keyOf(stack), { bytes, diagnostics: diagnostics(stack, bytes) })
      stats.early += 1
    } catch {
      // left to the request, which reports the engine's error for that template
    }
    setImmediate(poll, mine)
    return
  }
  setTimeout(poll, POLL_MS, mine)
}

function expect(stacks) {
  generation += 1
  expected = stacks.map((stack) => ({ stack, before: stamp(stack.templatePath), seen: null }))
  early = new Map()
  stats = { early: 0, hits: 0, misses: 0 }
  deadline = Date.now() + EXPECT_FOR_MS
  setImmediate(poll, generation)
  return { expecting: expected.length }
}

// A template's diagnostics now: the early ones when its bytes are the ones validated early, else the engine's.
function current(stack) {
  const bytes = fs.readFileSync(stack.templatePath)
  const kept = early.get(keyOf(stack))
  if (kept !== undefined && kept.bytes.equals(bytes)) {
    stats.hits += 1
    return kept.diagnostics
  }
  stats.misses += 1
  return diagnostics(stack, bytes)
}

function answer(request) {
  expected = [] // the synth is at its validation: what is left is validated below
  const results = []
  try {
    for (const stack of request) {
      try {
        results.push(current(stack))
      } catch (error) {
        // The engine throws its message as a string; say which template.
        return { error: `${stack.templatePath}: ${error instanceof Error ? error.message : String(error)}` }
      }
    }
  } finally {
    early = new Map() // this synth's: the next one expects its own
  }
  return results
}

readline
  .createInterface({ input: process.stdin, crlfDelay: Infinity })
  .on('line', (line) => {
    const request = JSON.parse(line)
    if (Array.isArray(request)) return reply(answer(request))
    reply(request.expect ? expect(request.expect) : { ...stats, expecting: expected.length })
  })
  // No more requests can come (the Python process closed the pipe, or died): the poll's timer must not keep a
  // worker nobody can ask running until its deadline.
  .on('close', () => process.exit(0))
