// The official `openai` npm client against infera-router in front of a PD pair of
// infera-mock-engines (pd_router_test.py): completions and chat, streamed and not.
// Prints one JSON line {"ids": [...request ids...]} and exits non-zero on a mismatch.
import { createRequire } from 'module';
const require = createRequire(process.env.NODE_MODULES + '/');
const OpenAI = require('openai').default ?? require('openai');

const client = new OpenAI({ baseURL: process.env.ROUTER_URL + '/v1', apiKey: 'x', maxRetries: 0 });
function check(cond, msg) { if (!cond) { console.error('FAIL: ' + msg); process.exit(1); } }
const prompt = Array.from({ length: 300 }, (_, i) => i + 1);
const ids = [];
// vllm-mooncake's decode leg generates max_tokens − 1 (the prefill made the first; doc/pd.md §3).
const minus = process.env.PD_PROTOCOL === 'vllm-mooncake' ? 1 : 0;

const { data: comp, response } = await client.completions
  .create({ model: 'mock-model', prompt, max_tokens: 5 }).withResponse();
ids.push(response.headers.get('x-infera-request-id'));
check(comp.usage.completion_tokens === 5 - minus, 'completion tokens: ' + JSON.stringify(comp.usage));
check(comp.usage.prompt_tokens === 300, 'prompt tokens: ' + JSON.stringify(comp.usage));
check(typeof comp.choices[0].text === 'string' && comp.choices[0].text.length > 0, 'text');

const stream = await client.completions
  .create({ model: 'mock-model', prompt, max_tokens: 4, stream: true,
            stream_options: { include_usage: true } }).withResponse();
ids.push(stream.response.headers.get('x-infera-request-id'));
let text = ''; let usage = null;
for await (const c of stream.data) { text += c.choices[0]?.text ?? ''; if (c.usage) usage = c.usage; }
check(text.length > 0, 'streamed text');
check(usage && usage.completion_tokens === 4 - minus, 'streamed usage ' + JSON.stringify(usage));

const messages = [{ role: 'user', content: 'tell me about prefill and decode disaggregation' }];
const chat = await client.chat.completions.create({ model: 'mock-model', messages, max_tokens: 3 })
  .withResponse();
ids.push(chat.response.headers.get('x-infera-request-id'));
check(chat.data.choices[0].message.content.length > 0, 'chat content');
check(chat.data.usage.completion_tokens === 3 - minus, 'chat tokens ' + JSON.stringify(chat.data.usage));

const chatStream = await client.chat.completions
  .create({ model: 'mock-model', messages, max_tokens: 3, stream: true }).withResponse();
ids.push(chatStream.response.headers.get('x-infera-request-id'));
let chunks = 0; text = '';
for await (const c of chatStream.data) { chunks++; text += c.choices[0]?.delta?.content ?? ''; }
check(chunks >= 1 && text.length > 0, 'chat stream chunks ' + chunks);

console.log(JSON.stringify({ ids }));
