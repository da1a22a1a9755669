// The template-validation worker (mlstack/validation_workers.py starts it): the WebAssembly engine that
// aws-cdk-lib's CloudFormationValidatePlugin runs, @aws/cloudformation-validate, in a process of its own.
// argv[2]: the folder of that package, read out of the installed aws-cdk-lib (never a copy of another version);
// argv[3]: the options CDK's plugin passes to validateTemplate, as JSON (the pseudo parameters come per stack).
// First line out, once the engine is made (about 0.6 s): {version, ruleIds}, what CDK's plugin reports as its
// version and rule IDs (CDKMetadata's analytics), the rule IDs computed as its `ruleIds` getter does.
// Then, per line in: a JSON list of {templatePath, accountId, region} (CDK's PolicyValidationStack); per line out:
// a JSON list (same order) of each template's diagnostics, with the fields CDK's plugin reads, or {error} when
// the engine fails on a template (CDK's plugin would throw: the caller raises).
'use strict'
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

function diagnostics(stack) {
  const report = engine.validateTemplate(new validate.TemplateFile(stack.templatePath), {
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

readline.createInterface({ input: process.stdin, crlfDelay: Infinity }).on('line', (line) => {
  const stacks = JSON.parse(line)
  const results = []
  for (const stack of stacks) {
    try {
      results.push(diagnostics(stack))
    } catch (error) {
      // The engine throws its message as a string; say which template.
      return reply({ error: `${stack.templatePath}: ${error instanceof Error ? error.message : String(error)}` })
    }
  }
  reply(results)
})
