// The official OpenAI Node client against tandem serve (run by tests/e2e/serve_openai_node.sh).
// Prints "ok NAME" / "not ok NAME # why" lines. Usage: node openai_client.js BASE_URL GOLDEN_JSON
const fs = require('fs');
const mod = require('openai');
const OpenAI = mod.OpenAI || mod.default || mod;

const [baseURL, goldenPath] = process.argv.slice(2);
const golden = JSON.parse(fs.readFileSync(goldenPath, 'utf8'));
const client = new OpenAI({ baseURL, apiKey: 'sk-test-key', maxRetries: 0, timeout: 20000 });

function report(name, cond, why) {
  console.log(cond ? `ok ${name}` : `not ok ${name} # ${why}`);
}

async function main() {
  const n = golden.greedy_ids.length;
  // A completion: the golden's greedy continuation (COMPLETION_TEXT: lib/serve.sh's golden_completion).
  try {
    const c = await client.completions.create({ model: 'stories260K', prompt: golden.text, max_tokens: n, temperature: 0 });
    report('openai_node_completion', c.choices[0].text === process.env.COMPLETION_TEXT, JSON.stringify(c.choices[0].text));
    report('openai_node_completion_usage', c.usage.completion_tokens === n, JSON.stringify(c.usage));
  } catch (e) { report('openai_node_completion', false, e.message); }
  // A non-streamed chat completion.
  const messages = [{ role: 'user', content: golden.text }];
  let whole = null;
  try {
    const r = await client.chat.completions.create({ model: 'stories260K', messages, max_tokens: 16, temperature: 0 });
    whole = r.choices[0].message.content;
    report('openai_node_chat', r.object === 'chat.completion' && typeof whole === 'string' && whole.length > 0 &&
      r.choices[0].finish_reason === 'length', JSON.stringify(r));
  } catch (e) { report('openai_node_chat', false, e.message); }
  // A streamed chat completion: its deltas add up to the non-streamed text.
  try {
    const stream = await client.chat.completions.create({
      model: 'stories260K', messages, max_tokens: 16, temperature: 0, stream: true,
      stream_options: { include_usage: true },
    });
    let text = '', chunks = 0, usage = null, finish = null;
    for await (const chunk of stream) {
      chunks++;
      if (chunk.usage) usage = chunk.usage;
      for (const ch of chunk.choices) {
        if (ch.delta && ch.delta.content) text += ch.delta.content;
        if (ch.finish_reason) finish = ch.finish_reason;
      }
    }
    report('openai_node_chat_stream', text === whole && chunks > 1, `streamed ${JSON.stringify(text)} vs ${JSON.stringify(whole)}`);
    report('openai_node_chat_stream_usage', usage && usage.completion_tokens === 16 && finish === 'length', JSON.stringify(usage));
  } catch (e) { report('openai_node_chat_stream', false, e.message); }
  // An error surfaces as the client's typed error with the status.
  try {
    await client.completions.create({ model: 'stories260K', prompt: 'a', temperature: 9 });
    report('openai_node_error', false, 'no error');
  } catch (e) {
    report('openai_node_error', e.status === 400, `status ${e.status}`);
  }
}

main().catch((e) => { console.log(`not ok openai_node_main # ${e.message}`); });
