// Tool calls through the official OpenAI Node client against tandem serve with one of the chat
// templates we ship (run by tests/e2e/serve_tools.sh, once per template family). The model is
// tiny-llama2-mha (random weights): what it writes is noise, so every well-formed call comes
// from the grammar; arguments are checked against each function's parameters by Ajv.
// Usage: node tools_client.js BASE_URL FAMILY   (prints "ok NAME" / "not ok NAME # why")
const mod = require('openai');
const OpenAI = mod.OpenAI || mod.default || mod;
const AjvMod = require('ajv');
const Ajv = AjvMod.default || AjvMod;

const [baseURL, family] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'sk-test-key', maxRetries: 0, timeout: 120000 });
const ajv = new Ajv({ strict: false });
const report = (name, cond, why) => console.log(cond ? `ok tools_${family}_${name}` : `not ok tools_${family}_${name} # ${why}`);

const weather = {
  type: 'object', properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['celsius', 'fahrenheit'] }, days: { type: 'integer', minimum: 1 } },
  required: ['city', 'unit'],
};
const search = { type: 'object', properties: { q: { type: 'string', maxLength: 16 }, tags: { type: 'array', items: { enum: ['a', 'b'] }, maxItems: 2 } }, required: ['q'] };
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'The weather in a city', parameters: weather } },
  { type: 'function', function: { name: 'search', description: 'Search the web', parameters: search } },
];
const schemaOf = { get_weather: weather, search };
const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
// OpenAI's "call_" + 24; the Mistral family's 9 letters and digits (its template demands them)
const mistral = /mistral/.test(family);
const idForm = mistral ? /^[A-Za-z0-9]{9}$/ : /^call_[A-Za-z0-9]{24}$/;

function checkCalls(calls, only) {
  if (!Array.isArray(calls) || calls.length === 0) return 'no tool_calls';
  for (const c of calls) {
    if (c.type !== 'function' || !idForm.test(c.id)) return `bad call ${JSON.stringify(c)}`;
    if (!schemaOf[c.function.name]) return `unknown function ${c.function.name}`;
    if (only && c.function.name !== only) return `called ${c.function.name}, not ${only}`;
    let args;
    try { args = JSON.parse(c.function.arguments); } catch (e) { return `arguments do not parse: ${c.function.arguments}`; }
    if (!ajv.validate(schemaOf[c.function.name], args)) return `arguments ${c.function.arguments}: ${ajv.errorsText()}`;
  }
  return null;
}

async function main() {
  // required, not streamed, several seeds
  for (let seed = 1; seed <= 5; seed++) {
    try {
      const r = await client.chat.completions.create({ model: 'tiny-llama2-mha', messages, tools, tool_choice: 'required', max_tokens: 300, temperature: 1, seed });
      const ch = r.choices[0];
      const why = checkCalls(ch.message.tool_calls);
      report(`required_${seed}`, !why && ch.finish_reason === 'tool_calls' && ch.message.content === null, why || JSON.stringify(ch));
    } catch (e) { report(`required_${seed}`, false, e.message); }
  }
  // a named function
  try {
    const r = await client.chat.completions.create({ model: 'tiny-llama2-mha', messages, tools, tool_choice: { type: 'function', function: { name: 'search' } }, max_tokens: 300, temperature: 1, seed: 9 });
    const why = checkCalls(r.choices[0].message.tool_calls, 'search');
    report('named', !why, why);
  } catch (e) { report('named', false, e.message); }
  // parallel_tool_calls false: exactly one call
  try {
    const r = await client.chat.completions.create({ model: 'tiny-llama2-mha', messages, tools, tool_choice: 'required', parallel_tool_calls: false, max_tokens: 300, temperature: 1, seed: 3 });
    const calls = r.choices[0].message.tool_calls;
    const why = checkCalls(calls);
    report('single', !why && calls.length === 1, why || `${calls.length} calls`);
  } catch (e) { report('single', false, e.message); }
  // streamed: the client's deltas add up to whole calls
  try {
    const stream = await client.chat.completions.create({ model: 'tiny-llama2-mha', messages, tools, tool_choice: 'required', max_tokens: 300, temperature: 1, seed: 11, stream: true });
    const calls = [];
    let finish = null;
    for await (const chunk of stream) {
      for (const ch of chunk.choices) {
        for (const d of (ch.delta && ch.delta.tool_calls) || []) {
          const c = calls[d.index] || (calls[d.index] = { id: '', type: 'function', function: { name: '', arguments: '' } });
          if (d.id) c.id = d.id;
          if (d.function && d.function.name) c.function.name += d.function.name;
          if (d.function && d.function.arguments) c.function.arguments += d.function.arguments;
        }
        if (ch.finish_reason) finish = ch.finish_reason;
      }
    }
    const why = checkCalls(calls);
    report('stream', !why && finish === 'tool_calls', why || finish);
  } catch (e) { report('stream', false, e.message); }
  // The client's own stream helper assembles the calls too.
  try {
    const runner = client.beta && client.beta.chat && client.beta.chat.completions && client.beta.chat.completions.stream
      ? client.beta.chat.completions.stream({ model: 'tiny-llama2-mha', messages, tools, tool_choice: 'required', max_tokens: 300, temperature: 1, seed: 12 })
      : client.chat.completions.stream({ model: 'tiny-llama2-mha', messages, tools, tool_choice: 'required', max_tokens: 300, temperature: 1, seed: 12 });
    const final = await runner.finalChatCompletion();
    const why = checkCalls(final.choices[0].message.tool_calls);
    report('stream_helper', !why, why);
  } catch (e) { report('stream_helper', false, e.message); }
  // auto: free text; whatever came back is either content or well-formed calls
  try {
    const r = await client.chat.completions.create({ model: 'tiny-llama2-mha', messages, tools, max_tokens: 30, temperature: 1, seed: 2 });
    const ch = r.choices[0];
    const ok = ch.message.tool_calls ? !checkCalls(ch.message.tool_calls) : typeof ch.message.content === 'string';
    report('auto', ok && ['stop', 'length', 'tool_calls'].includes(ch.finish_reason), JSON.stringify(ch));
  } catch (e) { report('auto', false, e.message); }
  // none: never calls
  try {
    const r = await client.chat.completions.create({ model: 'tiny-llama2-mha', messages, tools, tool_choice: 'none', max_tokens: 20, temperature: 0 });
    report('none', !r.choices[0].message.tool_calls && r.choices[0].finish_reason !== 'tool_calls', JSON.stringify(r.choices[0]));
  } catch (e) { report('none', false, e.message); }
  // a tool loop's second turn: the call and its result go back as the client keeps them (the
  // response message itself, nulls included), with the client's own ids too; then a third turn
  for (const own of [false, true]) {
    const name = own ? 'two_turns_client_ids' : 'two_turns';
    try {
      const r = await client.chat.completions.create({ model: 'tiny-llama2-mha', messages, tools, tool_choice: 'required', parallel_tool_calls: false, max_tokens: 300, temperature: 1, seed: 4 });
      const msg = r.choices[0].message;
      const why = checkCalls(msg.tool_calls);
      if (why) { report(name, false, why); continue; }
      if (own) msg.tool_calls[0].id = 'call_' + 'Xy12'.repeat(6); // another client's ids
      const history = [...messages, msg, { role: 'tool', tool_call_id: msg.tool_calls[0].id, content: '20 degrees' }];
      const r2 = await client.chat.completions.create({ model: 'tiny-llama2-mha', messages: history, tools, max_tokens: 8, temperature: 0 });
      const m2 = r2.choices[0].message;
      const r3 = await client.chat.completions.create({ model: 'tiny-llama2-mha', messages: [...history, m2, { role: 'user', content: 'Thanks' }], tools, max_tokens: 4 });
      report(name, r2.choices[0].finish_reason && r3.choices[0].finish_reason, JSON.stringify(r3.choices[0]));
    } catch (e) { report(name, false, `${e.status} ${e.message}`); }
  }
  // Hermes / Qwen2.5 with tool_choice auto: text, then <tool_call> (forced with the grammar
  // extension): the stream gives what the whole response gives (it streamed the markup as content)
  if (!mistral && !/^llama-3/.test(family)) {
    try {
      const grammar = 'root ::= "Let me check.\\n<tool_call>\\n{\\"name\\": \\"get_weather\\", \\"arguments\\": {\\"city\\": \\"Paris\\", \\"unit\\": \\"celsius\\"}}\\n</tool_call>"';
      const body = { model: 'tiny-llama2-mha', messages, tools, grammar, max_tokens: 300, temperature: 0 };
      const whole = (await client.chat.completions.create(body)).choices[0];
      const streamed = (await client.chat.completions.stream(body).finalChatCompletion()).choices[0];
      const shape = (ch) => JSON.stringify({ content: ch.message.content, calls: (ch.message.tool_calls || []).map((c) => [c.function.name, c.function.arguments]), finish: ch.finish_reason });
      const why = checkCalls(whole.message.tool_calls) || checkCalls(streamed.message.tool_calls);
      report('text_then_call_stream', !why && whole.message.content === 'Let me check.\n' && shape(whole) === shape(streamed) && whole.finish_reason === 'tool_calls',
        why || `${shape(whole)} vs ${shape(streamed)}`);
    } catch (e) { report('text_then_call_stream', false, `${e.status} ${e.message}`); }
    // logprobs with text, then a call: the stream carries every token's, as the whole answer
    // does (the held tokens' went nowhere before)
    try {
        const grammar =
            'root ::= "Let me check.\\n<tool_call>\\n{\\"name\\": \\"get_weather\\", \\"arguments\\": {\\"city\\": \\"Paris\\", \\"unit\\": \\"celsius\\"}}\\n</tool_call>"';
        const body = {
            model : 'tiny-llama2-mha',
            messages,
            tools,
            grammar,
            max_tokens : 300,
            temperature : 0,
            logprobs : true
        };
        const toks = (ch) =>
            ((ch.logprobs && ch.logprobs.content) || []).map((t) => t.token).join('');
        const whole = (await client.chat.completions.create(body)).choices[0];
        const streamed =
            (await client.chat.completions.stream(body).finalChatCompletion()).choices[0];
        report('text_then_call_logprobs', toks(whole).length > 0 && toks(whole) === toks(streamed),
               `${JSON.stringify(toks(whole))} vs ${JSON.stringify(toks(streamed))}`);
    } catch (e) {
        report('text_then_call_logprobs', false, `${e.status} ${e.message}`);
    }
    // two calls written (forced with the grammar) under parallel_tool_calls false: the first
    // only, whole and streamed (vLLM PR 26233); by default both
    try {
        const one =
            '<tool_call>\\n{\\"name\\": \\"get_weather\\", \\"arguments\\": {\\"city\\": \\"CITY\\", \\"unit\\": \\"celsius\\"}}\\n</tool_call>';
        const grammar =
            `root ::= "${one.replace('CITY', 'Paris')}\\n${one.replace('CITY', 'Rome')}"`;
        const calls = (ch) => (ch.message.tool_calls || [])
                                  .map((c) => JSON.parse(c.function.arguments).city)
                                  .join(',');
        const body = {
            model : 'tiny-llama2-mha',
            messages,
            tools,
            grammar,
            max_tokens : 300,
            temperature : 0
        };
        const both = (await client.chat.completions.create(body)).choices[0];
        const single = {...body, parallel_tool_calls : false};
        const whole = (await client.chat.completions.create(single)).choices[0];
        const streamed =
            (await client.chat.completions.stream(single).finalChatCompletion()).choices[0];
        report('not_parallel_first_call_only',
               calls(both) === 'Paris,Rome' && calls(whole) === 'Paris' &&
                   calls(streamed) === 'Paris' && whole.finish_reason === 'tool_calls' &&
                   streamed.finish_reason === 'tool_calls',
               `${calls(both)} / ${calls(whole)} / ${calls(streamed)} ${whole.finish_reason} ${
                   streamed.finish_reason}`);
    } catch (e) {
        report('not_parallel_first_call_only', false, `${e.status} ${e.message}`);
    }
  }
  // a named function that is not among the tools: 400
  try {
    await client.chat.completions.create({ model: 'tiny-llama2-mha', messages, tools, tool_choice: { type: 'function', function: { name: 'nope' } }, max_tokens: 5 });
    report('unknown_named', false, 'no error');
  } catch (e) { report('unknown_named', e.status === 400 && /nope/.test(e.message), `${e.status} ${e.message}`); }
}

main().catch((e) => { console.log(`not ok tools_${family}_main # ${e.message}`); });
