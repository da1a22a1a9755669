// One template-validation worker (mlstack/template_validation.py starts them): the WebAssembly engine that
// aws-cdk-lib's CloudFormationValidatePlugin runs, @aws/cloudformation-validate, in a process of its own.
// argv[2]: the folder of that package, taken from the installed aws-cdk-lib (never a copy of another version).
// The engine is made at start (about 0.6 s), before any request: the caller starts workers while it builds.
// stdin: one batch per line, a JSON list of {templatePath, accountId, region} (the fields of CDK's
//        PolicyValidationStack); stdout: one line per batch, a JSON list (same order) of the diagnostics of each
//        template, with the fields CDK's plugin reads. The options are the ones CDK's plugin passes to the engine.
// A line {"version": true} answers {"version": "<the engine core's version>"} (CDK reports it as the plugin's).
'use strict'
const path = require('node:path')
const readline = require('node:readline')

// stdout carries only the replies.
console.log = console.error
console.info = console.error

const validate = require(path.resolve(process.argv[2]))
const engine = new validate.CompositeEngine({})
const options = JSON.parse(process.argv[3])

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

// A request that fails ends the process (the caller reports stderr and fails the synth): the engine throws the
// error message as a string, which node would print without saying which template.
readline.createInterface({ input: process.stdin, crlfDelay: Infinity }).on('line', (line) => {
  let reply
  let current = 'the request'
  try {
    const request = JSON.parse(line)
    reply = Array.isArray(request)
      ? request.map((stack) => {
          current = stack.templatePath
          return diagnostics(stack)
        })
      : { version: validate.version() }
  } catch (error) {
    process.stderr.write(`${current}: ${error instanceof Error ? error.stack : String(error)}\n`)
    process.exit(1)
  }
  process.stdout.write(JSON.stringify(reply) + '\n')
})
