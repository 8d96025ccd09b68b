// Structured outputs through the official OpenAI Node client against tandem serve (run by
// tests/e2e/serve_structured.sh), validated by Ajv (a JSON Schema validator we did not write).
// stories260K has never seen JSON: whatever it emits must still parse and validate, because the
// grammar masks every token it could not emit. Prints "ok NAME" / "not ok NAME # why".
// Usage: node structured_client.js BASE_URL
const mod = require('openai');
const OpenAI = mod.OpenAI || mod.default || mod;
const AjvMod = require('ajv');
const Ajv = AjvMod.default || AjvMod;

const [baseURL] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'sk-test-key', maxRetries: 0, timeout: 120000 });
const ajv = new Ajv({ strict: false, allErrors: true });
require('ajv-formats')(ajv); // the formats the grammar enforces are checked too

function report(name, cond, why) {
  console.log(cond ? `ok ${name}` : `not ok ${name} # ${why}`);
}

const S = (n) => ({ type: 'string', maxLength: n });
// Every string is bounded (maxLength, enum, const or pattern) so that a story model ends its
// text within max_tokens; the grammar alone decides the rest.
const schemas = {
  flat_string: { type: 'object', properties: { name: S(12) }, required: ['name'], additionalProperties: false },
  numbers: { type: 'object', properties: { i: { type: 'integer' }, x: { type: 'number' } }, required: ['i', 'x'] },
  bool_null: { type: 'object', properties: { b: { type: 'boolean' }, z: { type: 'null' } }, required: ['b', 'z'] },
  enum_strings: { type: 'object', properties: { color: { enum: ['red', 'green', 'blue'] } }, required: ['color'] },
  enum_mixed: { type: 'object', properties: { v: { enum: [1, 'a', null, true, 2.5] } }, required: ['v'] },
  const_value: { type: 'object', properties: { kind: { const: 'point' }, n: { const: 3 } }, required: ['kind', 'n'] },
  nested2: {
    type: 'object', required: ['user'],
    properties: { user: { type: 'object', properties: { id: { type: 'integer' }, name: S(8) }, required: ['id', 'name'] } },
  },
  nested3: {
    type: 'object', required: ['a'],
    properties: { a: { type: 'object', required: ['b'], properties: { b: { type: 'object', required: ['c'], properties: { c: { type: 'boolean' } } } } } },
  },
  int_array: { type: 'object', properties: { xs: { type: 'array', items: { type: 'integer' }, minItems: 1, maxItems: 4 } }, required: ['xs'] },
  object_array: {
    type: 'object', required: ['items'],
    properties: { items: { type: 'array', maxItems: 2, items: { type: 'object', properties: { k: S(5), v: { type: 'number' } }, required: ['k', 'v'] } } },
  },
  all_optional: { type: 'object', properties: { a: S(6), b: { type: 'integer' }, c: { type: 'boolean' } } },
  some_optional: { type: 'object', properties: { a: S(6), b: { type: 'integer' }, c: { type: 'boolean' }, d: { type: 'null' } }, required: ['b', 'd'] },
  any_of: { type: 'object', properties: { v: { anyOf: [S(5), { type: 'integer' }] } }, required: ['v'] },
  nullable: { type: 'object', properties: { v: { type: ['string', 'null'], maxLength: 4 } }, required: ['v'] },
  refs: {
    $defs: { pt: { type: 'object', properties: { x: { type: 'integer' }, y: { type: 'integer' } }, required: ['x', 'y'] } },
    type: 'object', properties: { from: { $ref: '#/$defs/pt' }, to: { $ref: '#/$defs/pt' } }, required: ['from', 'to'],
  },
  pattern_code: { type: 'object', properties: { code: { type: 'string', pattern: '^[a-z]{3}-\\d{2}$' } }, required: ['code'] },
  pattern_alt: { type: 'object', properties: { pet: { type: 'string', pattern: '^(cat|dog)s?$' } }, required: ['pet'] },
  min_max_len: { type: 'object', properties: { s: { type: 'string', minLength: 2, maxLength: 5 } }, required: ['s'] },
  unicode_enum: { type: 'object', properties: { w: { enum: ['café', '日本', 'naïve ☃', '😀'] } }, required: ['w'] },
  escapes_const: { type: 'object', properties: { q: { const: 'say "hi" \\ now\n\ttab' } }, required: ['q'] },
  uint: { type: 'object', properties: { n: { type: 'integer', minimum: 0 } }, required: ['n'] },
  pos_int: { type: 'object', properties: { n: { type: 'integer', exclusiveMinimum: 0 } }, required: ['n'] },
  nonneg_number: { type: 'object', properties: { x: { type: 'number', minimum: 0 } }, required: ['x'] },
  top_array: { type: 'array', items: { enum: ['x', 'y', 'z'] }, maxItems: 3 },
  top_string: { type: 'string', maxLength: 8 },
  exact_items: { type: 'object', properties: { flags: { type: 'array', items: { type: 'boolean' }, minItems: 3, maxItems: 3 } }, required: ['flags'] },
  empty_object: { type: 'object', properties: {}, additionalProperties: false },
  all_of_ref: {
    $defs: { name: { type: 'string', maxLength: 6 } },
    type: 'object', properties: { n: { allOf: [{ $ref: '#/$defs/name' }] } }, required: ['n'],
  },
  deep_enum: {
    type: 'object', required: ['rows'],
    properties: { rows: { type: 'array', maxItems: 3, items: { type: 'object', required: ['s'], properties: { s: { enum: ['on', 'off'] } } } } },
  },
  pattern_class: { type: 'object', properties: { name: { type: 'string', pattern: '^[A-Z][a-z]{1,6}$' } }, required: ['name'] },
  escaped_key: { type: 'object', properties: { 'a "quoted" key': { type: 'integer' }, 'ключ': { type: 'boolean' } }, required: ['a "quoted" key', 'ключ'] },
  pattern_digits: { type: 'object', properties: { p: { type: 'string', pattern: '^\\d{2,4}(\\.\\d)?$' } }, required: ['p'] },
  // what Pydantic (Field(ge=0, le=120), Optional in v1, tagged unions), Zod (.int().min().max(),
  // .positive()) and FastAPI emit (the API audit's M4: each answered 400 before)
  int_bounds: { type: 'object', properties: { age: { type: 'integer', minimum: 0, maximum: 120 }, t: { type: 'integer', exclusiveMinimum: -5, exclusiveMaximum: 5 } }, required: ['age', 't'] },
  int_big_bounds: { type: 'object', properties: { n: { type: 'integer', minimum: -9007199254740991, maximum: -9007199254740000 } }, required: ['n'] },
  number_bounds: { type: 'object', properties: { p: { type: 'number', minimum: 0, maximum: 1 }, x: { type: 'number', exclusiveMinimum: 0, maximum: 2.5 } }, required: ['p', 'x'] },
  nullable_int: { type: 'object', properties: { v: { type: 'integer', minimum: 1, maximum: 9, nullable: true } }, required: ['v'] },
  one_of_kinds: { type: 'object', properties: { v: { oneOf: [{ type: 'string', maxLength: 3 }, { type: 'integer', minimum: 10, maximum: 99 }, { type: 'null' }] } }, required: ['v'] },
  tagged_union: {
    $defs: {
      Cat: { type: 'object', properties: { pet_type: { const: 'cat', type: 'string' }, lives: { type: 'integer', minimum: 1, maximum: 9 } }, required: ['pet_type', 'lives'] },
      Dog: { type: 'object', properties: { pet_type: { const: 'dog', type: 'string' }, name: S(6) }, required: ['pet_type', 'name'] },
    },
    type: 'object', required: ['pet'],
    properties: { pet: { oneOf: [{ $ref: '#/$defs/Cat' }, { $ref: '#/$defs/Dog' }], discriminator: { propertyName: 'pet_type' } } },
  },
  formats: {
    type: 'object', required: ['d', 't', 'u', 'ip'],
    properties: { d: { type: 'string', format: 'date' }, t: { type: 'string', format: 'date-time' }, u: { type: 'string', format: 'uuid' }, ip: { type: 'string', format: 'ipv4' } },
  },
};

async function one(name, schema, temperature, seed) {
  const r = await client.chat.completions.create({
    model: 'stories260K', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 300,
    temperature, seed, response_format: { type: 'json_schema', json_schema: { name, schema, strict: true } },
  });
  const c = r.choices[0];
  let v;
  try { v = JSON.parse(c.message.content); } catch (e) { return `does not parse (${c.finish_reason}): ${JSON.stringify(c.message.content)}`; }
  if (c.finish_reason !== 'stop') return `finish_reason ${c.finish_reason}`;
  const validate = ajv.compile(schema);
  if (!validate(v)) return `invalid: ${JSON.stringify(c.message.content)} ${ajv.errorsText(validate.errors)}`;
  return null;
}

async function main() {
  const names = Object.keys(schemas);
  report('structured_suite_size', names.length >= 30, `${names.length} schemas`);
  for (const name of names) {
    const schema = schemas[name];
    try {
      const runs = [one(name, schema, 0, undefined)];
      for (let seed = 1; seed <= 10; seed++) runs.push(one(name, schema, 1, seed));
      const res = await Promise.all(runs);
      const bad = res.map((e, i) => (e ? `${i ? 'seed ' + i : 'greedy'}: ${e}` : null)).filter((e) => e);
      report(`structured_${name}`, bad.length === 0, bad.slice(0, 2).join('; '));
    } catch (e) { report(`structured_${name}`, false, e.message); }
  }
  // Streamed: the deltas add up to a valid document.
  try {
    const schema = schemas.nested2;
    const stream = await client.chat.completions.create({
      model: 'stories260K', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 300, temperature: 1, seed: 7, stream: true,
      response_format: { type: 'json_schema', json_schema: { name: 'n', schema, strict: true } },
    });
    let text = '', finish = null;
    for await (const chunk of stream) for (const ch of chunk.choices) { if (ch.delta && ch.delta.content) text += ch.delta.content; if (ch.finish_reason) finish = ch.finish_reason; }
    const ok = finish === 'stop' && ajv.validate(schema, JSON.parse(text));
    report('structured_stream', ok, `${finish} ${JSON.stringify(text)}`);
  } catch (e) { report('structured_stream', false, e.message); }
  // max_tokens mid-object: "length", never a "stop" on an unfinished document.
  try {
    const r = await client.chat.completions.create({
      model: 'stories260K', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4, temperature: 0,
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: schemas.nested3 } },
    });
    report('structured_length', r.choices[0].finish_reason === 'length', JSON.stringify(r.choices[0]));
  } catch (e) { report('structured_length', false, e.message); }
  // json_object: a finished choice is a JSON object.
  try {
    const r = await client.chat.completions.create({
      model: 'stories260K', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 400, temperature: 0, n: 3, seed: 5,
      response_format: { type: 'json_object' },
    });
    const bad = r.choices.filter((c) => c.finish_reason === 'stop' && !(typeof JSON.parse(c.message.content) === 'object'));
    const began = r.choices.every((c) => c.message.content.startsWith('{'));
    report('structured_json_object', bad.length === 0 && began, JSON.stringify(r.choices.map((c) => [c.finish_reason, c.message.content.slice(0, 40)])));
  } catch (e) { report('structured_json_object', false, e.message); }
  // The llama.cpp-style grammar extension (llama.cpp's chess.gbnf).
  try {
    const grammar = 'root ::= "1. " move " " move "\\n" ([1-9] [0-9]? ". " move " " move "\\n")+\nmove ::= (pawn | nonpawn | castle) [+#]?\nnonpawn ::= [NBKQR] [a-h]? [1-8]? "x"? [a-h] [1-8]\npawn ::= ([a-h] "x")? [a-h] [1-8] ("=" [NBKQR])?\ncastle ::= "O-O" "-O"?\n';
    const r = await client.completions.create({ model: 'stories260K', prompt: 'Once', max_tokens: 40, temperature: 1, seed: 2, grammar });
    const text = r.choices[0].text;
    const move = '(?:(?:[a-h]x)?[a-h][1-8](?:=[NBKQR])?|[NBKQR][a-h]?[1-8]?x?[a-h][1-8]|O-O(?:-O)?)[+#]?';
    const re = new RegExp(`^1\\. ${move} ${move}\\n(?:[1-9][0-9]?\\. ${move} ${move}\\n)*`);
    report('structured_gbnf', re.test(text), JSON.stringify(text));
  } catch (e) { report('structured_gbnf', false, e.message); }
  // Without strict, a keyword the grammar cannot enforce is an annotation: 200, and the rest of
  // the schema still holds (uniqueItems unchecked; the items' bounds and the count are kept).
  try {
    const schema = { type: 'object', properties: { xs: { type: 'array', items: { type: 'integer', minimum: 1, maximum: 3 }, maxItems: 3, uniqueItems: true } }, required: ['xs'] };
    const r = await client.chat.completions.create({
      model: 'stories260K', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 300, temperature: 1, seed: 3,
      response_format: { type: 'json_schema', json_schema: { name: 'lax', schema } },
    });
    const c = r.choices[0];
    const rest = { ...schema, properties: { xs: { ...schema.properties.xs, uniqueItems: false } } };
    report('structured_lax_annotation', c.finish_reason === 'stop' && ajv.validate(rest, JSON.parse(c.message.content)), JSON.stringify(c));
  } catch (e) { report('structured_lax_annotation', false, `${e.status} ${e.message}`); }
  // Refusals: a clear 400 naming what is wrong.
  const refusals = [
    ['structured_bad_keyword', { type: 'json_schema', json_schema: { name: 'x', strict: true, schema: { type: 'object', properties: { a: { type: 'integer', multipleOf: 3 } } } } }, null, "'multipleOf' is not enforceable"],
    ['structured_unknown_keyword', { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { type: 'integer', maxLenght: 3 } } } } }, null, "'maxLenght' is not supported"],
    ['structured_bad_ref', { type: 'json_schema', json_schema: { name: 'x', schema: { $ref: '#/$defs/missing' } } }, null, 'does not resolve'],
    ['structured_bad_type', { type: 'xml' }, null, 'xml'],
    ['structured_left_recursion', null, 'root ::= root "a" | "b"\n', 'left recursion'],
    ['structured_never_ends', null, 'root ::= "a" root\n', 'never finish'],
    ['structured_bad_gbnf', null, 'root ::= "a\n', 'unterminated'],
    ['structured_emoji', null, 'root ::= [\\U0001F600-\\U0001F64F]\n', null],
    ['structured_no_token', null, 'root ::= [\\uD800-\\uDFFF]\n', 'no token'],
  ];
  for (const [name, rf, grammar, want] of refusals) {
    try {
      const body = { model: 'stories260K', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8 };
      if (rf) body.response_format = rf;
      if (grammar) body.grammar = grammar;
      const r = await client.chat.completions.create(body);
      // stories260K's vocabulary has byte fallback: an emoji grammar is reachable byte by byte
      if (want === null) report(name, /^[\u{1F600}-\u{1F64F}]$/u.test(r.choices[0].message.content), JSON.stringify(r.choices[0]));
      else report(name, false, `no error: ${JSON.stringify(r.choices[0])}`);
    } catch (e) {
      report(name, e.status === 400 && (want === null || String(e.message).includes(want)), `${e.status} ${e.message}`);
    }
  }
}

main().catch((e) => { console.log(`not ok structured_main # ${e.message}`); });
