// The rest of the surface through the official OpenAI Node client (run by
// tests/e2e/serve_extra_api.sh): models.retrieve, completions with echo (whole and streamed).
// Usage: node extra_client.js BASE_URL GOLDEN_JSON
const fs = require('fs');
const mod = require('openai');
const OpenAI = mod.OpenAI || mod.default || mod;
const [baseURL, goldenPath] = process.argv.slice(2);
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
  try {
    await client.completions.create({ model: 'stories260K', prompt: 'a', echo: true, logprobs: 1 });
    report('extra_echo_logprobs_refused', false, 'no error');
  } catch (e) { report('extra_echo_logprobs_refused', e.status === 400 && /echo/.test(e.message), `${e.status} ${e.message}`); }
}
main().catch((e) => console.log(`not ok extra_main # ${e.message}`));
