// The dashboard in a real browser: Debian's chromium, headless, driven by puppeteer-core
// (scripts/fetch-fixtures). Env: NODE_MODULES, CHROMIUM, DASHBOARD_URL, TARGETS (JSON
// list of target names), SCREENSHOT (PNG path). Prints "ok: ..." per check; exits
// non-zero on the first failure.
import { createRequire } from 'module';
const require = createRequire(process.env.NODE_MODULES + '/');
const puppeteer = require('puppeteer-core');

const targets = JSON.parse(process.env.TARGETS);
function check(cond, msg) {
  if (!cond) { console.error('FAIL: ' + msg); process.exit(1); }
  console.log('ok: ' + msg);
}
// Bounded polling (no fixed sleeps): `fn` until truthy or `ms` pass.
async function poll(fn, ms, what) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const v = await fn();
    if (v) return v;
    await new Promise(r => setTimeout(r, 100));
  }
  check(false, 'timed out: ' + what);
}

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM,
  headless: true,
  // root in CI containers: chromium's sandbox needs user namespaces it may not have.
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
try {
  const page = await browser.newPage();
  const problems = [];
  page.on('console', m => { if (m.type() === 'error') problems.push('console: ' + m.text()); });
  page.on('pageerror', e => problems.push('page error: ' + e.message));
  page.on('requestfailed', r => problems.push('request failed: ' + r.url()));
  page.on('request', r => {
    if (!r.url().startsWith(new URL(process.env.DASHBOARD_URL).origin)) {
      problems.push('external request: ' + r.url());
    }
  });
  await page.setViewport({ width: 1366, height: 900 });
  await page.goto(process.env.DASHBOARD_URL, { waitUntil: 'load' });

  const rows = () => page.$$eval('#targets tbody tr', trs => trs.map(tr => tr.dataset.key));
  await poll(async () => (await rows()).length === targets.length, 10000, 'target rows');
  const shown = await rows();
  check(targets.every(t => shown.includes(t)), 'every target shown: ' + shown.join(' '));

  // Numbers move as traffic flows: the picks-per-target column and the last picks.
  const sample = () => page.evaluate(() => ({
    picks: [...document.querySelectorAll('#targets tbody td[data-label="picks 1m"]')]
        .map(td => td.textContent).join(','),
    first: document.querySelector('#picks tbody tr')?.dataset.key ?? '',
    status: document.getElementById('status').textContent,
  }));
  const before = await sample();
  await poll(async () => {
    const now = await sample();
    return now.picks !== before.picks && now.first !== before.first;
  }, 15000, 'numbers changing under traffic');
  check(true, 'per-target picks and the last picks change under traffic');
  const hit = await page.$eval('[data-total="hit rate (1 min)"] .v', e => e.textContent);
  check(/%$/.test(hit), 'fleet hit rate shown: ' + hit);
  const paths = await page.$$eval('svg path', ps => ps.length);
  check(paths >= 3, `charts drawn (${paths} SVG paths)`);
  const status = await page.$eval('#status', e => e.className);
  check(status !== 'bad', 'the status line reports no error');

  // Wait until the hit-rate and TTFT charts have a few seconds of lines, then the picture.
  await poll(() => page.$$eval('#c-ttft path', ps => ps.length >= 2), 10000, 'TTFT chart lines');
  await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true });
  check(true, 'screenshot written to ' + process.env.SCREENSHOT);

  // A phone: nothing wider than the screen (tables stack into cards).
  await page.setViewport({ width: 390, height: 844, isMobile: true, deviceScaleFactor: 2 });
  await poll(() => page.evaluate(() =>
    document.documentElement.scrollWidth <= window.innerWidth + 1), 5000, 'phone width');
  check(true, 'readable on a 390 px phone: no horizontal scroll');
  if (process.env.SCREENSHOT_PHONE) {
    await page.screenshot({ path: process.env.SCREENSHOT_PHONE, fullPage: false });
  }
  check(problems.length === 0, 'no console error, page error or external request: ' +
        JSON.stringify(problems));
} finally {
  await browser.close();
}
