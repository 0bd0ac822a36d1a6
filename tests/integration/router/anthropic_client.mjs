// The official @anthropic-ai/sdk client against infera-router's /v1/messages.
import { createRequire } from 'module';
const require = createRequire(process.env.NODE_MODULES + '/');
const sdk = require('@anthropic-ai/sdk');
const Anthropic = sdk.default ?? sdk.Anthropic ?? sdk;

const client = new Anthropic({ baseURL: process.env.ROUTER_URL, apiKey: 'x', maxRetries: 0 });
function check(cond, msg) { if (!cond) { console.error('FAIL: ' + msg); process.exit(1); } }

const msg = await client.messages.create({
  model: 'fake-model', max_tokens: 16, system: 'be brief',
  messages: [{ role: 'user', content: 'hello' }] });
check(msg.type === 'message', 'type');
check(msg.content[0].type === 'text' && msg.content[0].text === 'tok0 tok1 tok2 ', 'text: ' + JSON.stringify(msg));
check(msg.stop_reason === 'end_turn', 'stop_reason');

const stream = client.messages.stream({
  model: 'fake-model', max_tokens: 16, messages: [{ role: 'user', content: 'hello' }] });
let text = '';
stream.on('text', (t) => { text += t; });
const final = await stream.finalMessage();
check(text === 'tok0 tok1 tok2 ', 'streamed text: ' + text);
check(final.content[0].text === 'tok0 tok1 tok2 ', 'final message');
check(final.usage.output_tokens === 3, 'usage ' + JSON.stringify(final.usage));

try {
  await client.messages.create({ model: 'fake-model', messages: [{ role: 'user', content: 'x' }] });
  check(false, 'missing max_tokens must fail');
} catch (e) {
  check(e.status === 400, 'status ' + e.status);
  check(e.error?.type === 'error' && e.error?.error?.type === 'invalid_request_error',
        'anthropic error shape ' + JSON.stringify(e.error));
}
console.log('anthropic client OK');
