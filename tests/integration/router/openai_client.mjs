// The official `openai` npm client against infera-router: chat (streaming and not)
// and completions with an integer-array prompt. Exits non-zero on any mismatch.
import { createRequire } from 'module';
const require = createRequire(process.env.NODE_MODULES + '/');
const OpenAI = require('openai').default ?? require('openai');

const client = new OpenAI({ baseURL: process.env.ROUTER_URL + '/v1', apiKey: 'x', maxRetries: 0 });
function check(cond, msg) { if (!cond) { console.error('FAIL: ' + msg); process.exit(1); } }

const chat = await client.chat.completions.create({
  model: 'fake-model', messages: [{ role: 'user', content: 'hello' }] });
check(chat.choices[0].message.content === 'tok0 tok1 tok2 ', 'chat content: ' + JSON.stringify(chat));

const stream = await client.chat.completions.create({
  model: 'fake-model', messages: [{ role: 'user', content: 'hello' }], stream: true });
let text = ''; let chunks = 0;
for await (const c of stream) { chunks++; text += c.choices[0]?.delta?.content ?? ''; }
check(text === 'tok0 tok1 tok2 ', 'streamed text: ' + text);
check(chunks >= 4, 'chunk count ' + chunks);

const comp = await client.completions.create({ model: 'fake-model', prompt: [1, 2, 3, 4], max_tokens: 3 });
check(comp.choices[0].text === 'tok0 tok1 tok2 ', 'completion text');

try {
  await client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] });
  check(false, 'unknown model must fail');
} catch (e) {
  check(e.status === 404, 'unknown model status ' + e.status);
  check(/does not exist/.test(e.message), 'unknown model message ' + e.message);
}
const models = await client.models.list();
check(models.data.some(m => m.id === 'fake-model'), 'models list');
console.log('openai client OK');
