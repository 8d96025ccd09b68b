// The rest of the surface through the official OpenAI Node client (run by
// tests/e2e/serve_extra_api.sh): models.retrieve, completions with echo (whole and streamed; with
// logprobs: the prompt's against transformers' goldens),
// prompt arrays (OpenAI's batch form: strings, token-id arrays; one choice per prompt times n,
// indexed prompt-major; usage summed; streamed too), each choice checked against the same prompt
// sent alone.
// Usage: node extra_client.js BASE_URL GOLDEN_JSON [GOLDEN_JSON ...]
const fs = require('fs');
const mod = require('openai');
const OpenAI = mod.OpenAI || mod.default || mod;
const [baseURL, goldenPath, ...more] = process.argv.slice(2);
const goldens = [goldenPath, ...more].map((p) => JSON.parse(fs.readFileSync(p, 'utf8')));
const golden = JSON.parse(fs.readFileSync(goldenPath, 'utf8'));
const client = new OpenAI({ baseURL, apiKey: 'sk-test-key', maxRetries: 0, timeout: 30000 });
const report = (name, cond, why) => console.log(cond ? `ok ${name}` : `not ok ${name} # ${why}`);

async function main() {
  try {
    const m = await client.models.retrieve('stories260K');
    report('extra_model_retrieve', m.id === 'stories260K' && m.object === 'model', JSON.stringify(m));
  } catch (e) { report('extra_model_retrieve', false, e.message); }
  try {
    await client.models.retrieve('gpt-4');
    report('extra_model_missing', false, 'no error');
  } catch (e) { report('extra_model_missing', e.status === 404, `${e.status} ${e.message}`); }
  const n = golden.greedy_ids.length;
  try {
    const c = await client.completions.create({ model: 'stories260K', prompt: golden.text, max_tokens: n, temperature: 0, echo: true });
    report('extra_echo', c.choices[0].text === golden.text + golden.greedy_text, JSON.stringify(c.choices[0].text));
  } catch (e) { report('extra_echo', false, e.message); }
  try {
    const stream = await client.completions.create({ model: 'stories260K', prompt: golden.text, max_tokens: n, temperature: 0, echo: true, stream: true });
    let text = '';
    for await (const chunk of stream) for (const ch of chunk.choices) text += ch.text || '';
    report('extra_echo_stream', text === golden.text + golden.greedy_text, JSON.stringify(text));
  } catch (e) { report('extra_echo_stream', false, e.message); }
  await echoLogprobs();
  await batches();
}

// echo with logprobs: the prompt's tokens carry the log-softmax of the prefill's logits at the
// position before each (the first: null), checked against transformers' float64 logits and
// logsumexp of the same prompts (tests/data/golden: top-16 logits per position). Tolerance 2e-3:
// the CPU backend's logits are within 1e-3 of those (tests/cpu/test_golden.c), and a logprob is a
// logit minus the logsumexp, each within that.
async function echoLogprobs() {
  for (const g of goldens) {
    const name = `extra_echo_logprobs_${g.name}`;
    try {
      const base = { model: 'stories260K', prompt: g.text, max_tokens: 4, temperature: 0, logprobs: 3 };
      const c = await client.completions.create({ ...base, echo: true });
      const plain = await client.completions.create(base);
      const lp = c.choices[0].logprobs;
      const np = c.usage.prompt_tokens;
      let worst = 0, checked = 0, why = '';
      if (np !== g.ids.length) why = `prompt_tokens ${np}, golden ${g.ids.length}`;
      if (lp.tokens.length !== np + c.usage.completion_tokens) why += ` ${lp.tokens.length} tokens`;
      if (lp.token_logprobs[0] !== null || lp.top_logprobs[0] !== null) why += ' first not null';
      for (let i = 1; i < np && !why; i++) {
        const pos = g.positions[i - 1];
        const k = pos.top_ids.indexOf(g.ids[i]);
        if (k < 0) continue; /* outside the golden's top 16 */
        const want = pos.top_logits[k] - pos.logsumexp;
        worst = Math.max(worst, Math.abs(lp.token_logprobs[i] - want));
        const best = Math.max(...Object.values(lp.top_logprobs[i]));
        worst = Math.max(worst, Math.abs(best - (pos.top_logits[0] - pos.logsumexp)));
        checked++;
      }
      if (!why && checked < np - 2) why = `only ${checked} of ${np - 1} positions in the golden's top 16`;
      if (!why && worst > 2e-3) why = `worst logprob difference ${worst}`;
      // the generated tokens' logprobs are the same as without echo
      const gen = lp.token_logprobs.slice(np);
      if (!why && JSON.stringify(gen) !== JSON.stringify(plain.choices[0].logprobs.token_logprobs)) why = 'generated logprobs differ';
      if (!why && c.choices[0].text !== g.text + plain.choices[0].text) why = 'text';
      // each token's text_offset points at its text in the echoed prompt and the generation
      const text = c.choices[0].text;
      for (let i = 1; i < lp.tokens.length && !why; i++) {
        const t = lp.tokens[i], o = lp.text_offset[i];
        // a text's first word's leading space is stripped by the decoder (SentencePiece): the
        // prompt's first token and the generation's first
        const first = o === 0 || (i === np && o === g.text.length);
        if (!(text.startsWith(t, o) || (t[0] === ' ' && first && text.startsWith(t.slice(1), o)))) why = `token ${i} ${JSON.stringify(t)} not at offset ${o}`;
      }
      report(name, !why, why + ' ' + JSON.stringify(lp).slice(0, 400));
    } catch (e) { report(name, false, e.message); }
  }
  try {
    await client.completions.create({ model: 'stories260K', prompt: 'a', echo: true, logprobs: 1, stream: true });
    report('extra_echo_logprobs_stream_refused', false, 'no error');
  } catch (e) { report('extra_echo_logprobs_stream_refused', e.status === 400 && /echo/.test(e.message), `${e.status} ${e.message}`); }
}

async function batches() {
  const prompts = goldens.map((g) => g.text);
  const max_tokens = 12;
  const base = { model: 'stories260K', max_tokens, temperature: 0 };
  // each prompt alone: the reference for its choices in a batch
  const alone = [];
  for (const p of prompts) alone.push(await client.completions.create({ ...base, prompt: p }));
  const want = alone.map((c) => c.choices[0].text);
  const sum = (k) => alone.reduce((s, c) => s + c.usage[k], 0);
  try {
    const n = 2;
    const c = await client.completions.create({ ...base, prompt: prompts, n });
    const byIndex = [...c.choices].sort((x, y) => x.index - y.index);
    const ok = byIndex.length === prompts.length * n && byIndex.every((ch, i) => ch.index === i && ch.text === want[Math.floor(i / n)]);
    report('extra_prompt_array', ok, JSON.stringify(c.choices));
    report('extra_prompt_array_usage', c.usage.prompt_tokens === sum('prompt_tokens') && c.usage.completion_tokens === n * sum('completion_tokens'),
      `${JSON.stringify(c.usage)} vs alone ${sum('prompt_tokens')} / ${sum('completion_tokens')} x ${n}`);
  } catch (e) { report('extra_prompt_array', false, e.message); }
  try {
    const c = await client.completions.create({ ...base, prompt: goldens.map((g) => g.ids) });
    const ok = c.choices.length === prompts.length && c.choices.every((ch) => ch.text === want[ch.index]);
    report('extra_prompt_token_arrays', ok, JSON.stringify(c.choices));
  } catch (e) { report('extra_prompt_token_arrays', false, e.message); }
  try {
    const stream = await client.completions.create({ ...base, prompt: prompts, stream: true, stream_options: { include_usage: true } });
    const text = prompts.map(() => '');
    const finish = prompts.map(() => null);
    let usage = null;
    for await (const chunk of stream) {
      for (const ch of chunk.choices) {
        text[ch.index] += ch.text || '';
        if (ch.finish_reason) finish[ch.index] = ch.finish_reason;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    report('extra_prompt_array_stream', text.every((t, i) => t === want[i]) && finish.every((f) => f),
      JSON.stringify({ text, finish }));
    report('extra_prompt_array_stream_usage', usage && usage.prompt_tokens === sum('prompt_tokens') && usage.completion_tokens === sum('completion_tokens'),
      JSON.stringify(usage));
  } catch (e) { report('extra_prompt_array_stream', false, e.message); }
  try {
    const c = await client.completions.create({ ...base, prompt: prompts, echo: true });
    report('extra_prompt_array_echo', c.choices.every((ch) => ch.text === prompts[ch.index] + want[ch.index]), JSON.stringify(c.choices));
  } catch (e) { report('extra_prompt_array_echo', false, e.message); }
  try {
    await client.completions.create({ ...base, prompt: Array.from({ length: 33 }, (_, i) => `p${i}`) });
    report('extra_prompt_array_bounded', false, 'no error');
  } catch (e) { report('extra_prompt_array_bounded', e.status === 400 && e.param === 'prompt', `${e.status} ${e.param} ${e.message}`); }
}
main().catch((e) => console.log(`not ok extra_main # ${e.message}`));
