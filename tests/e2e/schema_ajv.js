// Validates the documents tests/e2e/schema_ajv.sh collected (JSON lines {schema, doc}) with Ajv
// and ajv-formats. Prints "ok NAME" / "not ok NAME # why" per kind of schema.
// Usage: node schema_ajv.js SAMPLES.jsonl
const fs = require('fs');
const AjvMod = require('ajv');
const Ajv = AjvMod.default || AjvMod;
const fmtMod = require('ajv-formats');
const addFormats = fmtMod.default || fmtMod;

const ajv = new Ajv({ strict: false, allErrors: true });
addFormats(ajv);
const lines = fs.readFileSync(process.argv[2], 'utf8').split('\n').filter((l) => l);
const groups = { integer: [0, []], number: [0, []], format: [0, []] };
for (const line of lines) {
  const { schema, doc } = JSON.parse(line);
  const g = groups[schema.format ? 'format' : schema.type];
  g[0]++;
  if (!ajv.validate(schema, doc)) g[1].push(`${JSON.stringify(doc)} against ${JSON.stringify(schema)}: ${ajv.errorsText()}`);
}
for (const [kind, [n, bad]] of Object.entries(groups)) {
  const name = `schema_ajv_${kind}_samples`;
  // enough documents to mean something: the unit tests draw thousands
  if (n < 200) console.log(`not ok ${name} # only ${n} documents`);
  else if (bad.length) console.log(`not ok ${name} # ${bad.length}/${n} invalid: ${bad.slice(0, 3).join('; ')}`);
  else console.log(`ok ${name} # ${n} documents valid`);
}
