// Runs the http-cache-tests suite (installed at SUITE) against a reverse-proxy cache at BASE,
// or reads a results file the suite's own CLI wrote, and prints one line per required test
// that did not pass ("fail ID: why") and a closing count ("required R, passed P").
// The suite's own tests only: its CLI adds the `Surrogate-Control` group, a CDN field weir
// does not implement. A required test is one whose kind is `required` or unset, run outside a
// browser; it passes when its result is `true` and every test it depends on passed too (as
// the suite's report counts them).
//   node run.mjs SUITE BASE [RESULTS_OUT]
//   node run.mjs SUITE --results FILE
import { readFileSync, writeFileSync } from 'node:fs'
import { pathToFileURL } from 'node:url'
import { join } from 'node:path'

const [suite, base, out] = process.argv.slice(2)
const load = file => import(pathToFileURL(join(suite, file)).href)

const groups = (await load('tests/index.mjs')).default

let results
if (base === '--results') {
  results = JSON.parse(readFileSync(out, 'utf8'))
} else {
  const fetch = (await import(pathToFileURL(join(suite, '../node-fetch/lib/index.js')).href)).default
  const runner = await load('client/runner.mjs')
  await runner.runTests(groups, fetch, false, base)
  results = runner.getResults()
  if (out) writeFileSync(out, JSON.stringify(results, null, 2))
}

const byId = new Map()
for (const group of groups) {
  for (const test of group.tests) {
    if (test.browser_only !== true) byId.set(test.id, test)
  }
}
const passed = (id, seen = new Set()) => {
  const test = byId.get(id)
  if (test === undefined || results[id] !== true || seen.has(id)) return false
  seen.add(id)
  return (test.depends_on || []).every(dep => passed(dep, seen))
}
const why = id => {
  const result = results[id]
  if (result === undefined) return 'not run'
  if (result === true) return `depends on ${byId.get(id).depends_on.filter(d => !passed(d)).join(', ')}`
  return result.join(': ')
}

let required = 0
let count = 0
for (const [id, test] of byId) {
  if (test.kind !== undefined && test.kind !== 'required') continue
  required++
  if (passed(id)) {
    count++
  } else {
    console.log(`fail ${id}: ${why(id)}`)
  }
}
console.log(`required ${required}, passed ${count}`)
