// The wave timeline (issue 12, item 2) in headless chromium: the dashboard at `/` and the UI
// extension's Waves tab draw the last sync of argocd/platform as an SVG, and what is drawn must be
// what wavegate's API says — waves in order top to bottom, each labelled, applied markers at the
// applied times, the blocking wave tinted with its reason — before and after the scenario is fixed.
//
// Scenario (scripts/seed.sh): Argo CD's sync of argocd/platform is Running; waves 0-2 were applied
// one after the other by the field manager argocd-controller, the gate in wave 2 waits on Service
// cicd/forgejo (wave 1), whose selector app=forgejo matches no pod; wave 3 is not reached.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { REPO, SCREENSHOTS, wavegateUrl, WAVEGATE_TOKEN, launch, guardNetwork, apiGet, eventually } from './lib/common.mjs';
import { startHarness } from './lib/harness-server.mjs';

const run = promisify(execFile);
const KUBECTL = process.env.KUBECTL || 'kubectl';
const BASE = wavegateUrl(); // throws (fails the file) when WAVEGATE_URL is unset
const APP = { namespace: 'argocd', name: 'platform', project: 'default' };
const WAVES = `api/v1/applications/${APP.namespace}/${APP.name}/waves`;
const DASH_FIG = '[data-testid="app-argocd/platform"] [data-testid="timeline"]';
const EXT_FIG = '[data-testid="wavegate-waves-tab"] [data-testid="wavegate-timeline"]';

async function kubectl(...args) {
  if (!process.env.KUBECONFIG) throw new Error('KUBECONFIG is not set: the timeline test edits the scenario with kubectl');
  try {
    return (await run(KUBECTL, args, { env: process.env, timeout: 20000 })).stdout;
  } catch (e) {
    throw new Error(`kubectl ${args.join(' ')} failed: ${e.stderr || e.message}`);
  }
}
const setForgejoSelector = app =>
  kubectl('-n', 'cicd', 'patch', 'service', 'forgejo', '--type', 'merge', '-p', JSON.stringify({ spec: { selector: { app } } }));

async function timeline() {
  const r = await apiGet(BASE, WAVES);
  assert.equal(r.status, 200, `GET ${WAVES} answered ${r.status}: ${JSON.stringify(r.body)}`);
  assert.ok(r.body.timeline, 'the waves answer carries a timeline');
  return r.body.timeline;
}

// What the SVG in `root` shows, read from the drawn elements and their geometry.
function readDrawn(page, root) {
  return page.evaluate(root => {
    const fig = document.querySelector(root);
    if (!fig) return null;
    const num = (el, a) => (el ? Number(el.getAttribute(a)) : null);
    // The drawn words of an SVG text, without its <title> tooltip.
    const own = el => [...el.childNodes].filter(n => n.nodeType === Node.TEXT_NODE).map(n => n.textContent).join('');
    return [...fig.querySelectorAll('svg g[data-testid^="timeline-wave-"]')].map(g => {
      const row = g.querySelector('[data-testid="timeline-row"]');
      return {
        wave: Number(g.getAttribute('data-wave')),
        blocking: g.getAttribute('data-blocking') === 'true',
        applied: g.getAttribute('data-applied'),
        healthy: g.getAttribute('data-healthy'),
        label: own(g.querySelector('[data-testid="timeline-label"]')),
        status: own(g.querySelector('[data-testid="timeline-status"]')),
        times: own(g.querySelector('[data-testid="timeline-times"]')),
        top: row.getBoundingClientRect().top,
        fill: row.getAttribute('fill'),
        appliedX: num(g.querySelector('[data-testid="timeline-applied"]'), 'cx'),
        healthyMarks: g.querySelectorAll('[data-testid="timeline-healthy"]').length,
        healthyBox: (() => { const d = g.querySelector('[data-testid="timeline-healthy"]'); return d ? d.getBoundingClientRect().left + d.getBoundingClientRect().width / 2 : null; })(),
        appliedBox: (() => { const c = g.querySelector('[data-testid="timeline-applied"]'); return c ? c.getBoundingClientRect().left + c.getBoundingClientRect().width / 2 : null; })(),
        bars: g.querySelectorAll('[data-testid="timeline-bar"]').length,
        reason: [...g.querySelectorAll('[data-testid="timeline-reason"]')].map(own).join(' '),
      };
    });
  }, root);
}

// The drawing must say what the API says, wave for wave; returns a message when it does not.
function mismatch(drawn, t) {
  if (!drawn) return 'no timeline drawn';
  const want = t.waves.map(w => w.wave);
  const got = drawn.map(d => d.wave);
  if (JSON.stringify(got) !== JSON.stringify(want)) return `waves drawn ${JSON.stringify(got)}, API ${JSON.stringify(want)}`;
  for (const [i, w] of t.waves.entries()) {
    const d = drawn[i];
    if (d.label !== `Wave ${w.wave}`) return `row ${i} labelled ${d.label}`;
    if (!d.status.includes(w.status)) return `wave ${w.wave} status ${d.status}, API ${w.status}`;
    if (d.blocking !== (t.blockingWave === w.wave)) return `wave ${w.wave} blocking=${d.blocking}, API blockingWave ${t.blockingWave}`;
    if (d.applied !== w.applied || d.healthy !== w.healthy) return `wave ${w.wave} drawn ${d.applied}/${d.healthy}, API ${w.applied}/${w.healthy}`;
    if ((d.appliedX != null) !== (w.appliedAt != null)) return `wave ${w.wave}: applied marker ${d.appliedX}, appliedAt ${w.appliedAt}`;
    if ((d.healthyMarks === 1) !== (w.healthyAt != null)) return `wave ${w.wave}: ${d.healthyMarks} healthy marks, healthyAt ${w.healthyAt}`;
  }
  return null;
}

function assertGeometry(drawn, t) {
  // Top to bottom in wave order.
  for (let i = 1; i < drawn.length; i++) assert.ok(drawn[i].top > drawn[i - 1].top, `wave ${drawn[i].wave} is drawn below wave ${drawn[i - 1].wave}`);
  // Applied markers left to right in the order of the applied times.
  const applied = t.waves.map((w, i) => [Date.parse(w.appliedAt), drawn[i].appliedX]).filter(([at]) => !isNaN(at));
  for (let i = 1; i < applied.length; i++) {
    if (applied[i][0] > applied[i - 1][0]) assert.ok(applied[i][1] > applied[i - 1][1], `applied markers out of time order: ${JSON.stringify(applied)}`);
  }
  // Exactly the blocking wave is tinted, and carries its reason.
  for (const d of drawn) {
    if (d.blocking) {
      assert.equal(d.fill, '#fde0de', `blocking wave ${d.wave} is tinted`);
      assert.match(d.reason, /^Blocking: /);
      assert.match(d.status, /blocking/);
      assert.ok(t.blockingReason.replace(/\s+/g, ' ').startsWith(d.reason.replace(/^Blocking: /, '').split('\u2026')[0].slice(0, 60)),
        `drawn reason ${JSON.stringify(d.reason)} is the API's ${JSON.stringify(t.blockingReason)}`);
    } else {
      assert.notEqual(d.fill, '#fde0de', `wave ${d.wave} is not blocking but tinted`);
      assert.equal(d.reason, '');
    }
  }
}

async function shoot(locator, name) {
  fs.mkdirSync(SCREENSHOTS, { recursive: true });
  const file = path.join(SCREENSHOTS, name + '.png');
  await locator.screenshot({ path: file });
  assert.ok(fs.statSync(file).size > 1000, `${file} was written`);
  return file;
}

describe('wave timeline', () => {
  let browser, harness;
  const foreign = [];
  const pageErrors = [];

  async function newPage() {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    if (WAVEGATE_TOKEN) await context.addInitScript(t => sessionStorage.setItem('wavegate.token', t), WAVEGATE_TOKEN);
    await guardNetwork(context, foreign);
    const page = await context.newPage();
    page.on('pageerror', e => pageErrors.push(e.message));
    return { context, page };
  }

  before(async () => {
    await eventually(async () => (await apiGet(BASE, 'readyz')).status === 200,
      { ms: 30000, every: 500, what: `wavegate at ${BASE} to answer /readyz with 200` });
    await setForgejoSelector('forgejo');
    harness = await startHarness({ backend: BASE, token: WAVEGATE_TOKEN, app: APP });
    browser = await launch();
  });

  after(async () => {
    await browser?.close();
    await harness?.close();
    await setForgejoSelector('forgejo').catch(() => {});
  });

  test('the API times the seeded sync from Argo CD\'s records', async () => {
    const t = await eventually(async () => { const t = await timeline(); return t.blockingWave === 1 && t; },
      { what: 'wave 1 blocking' });
    assert.equal(t.sync.phase, 'Running');
    assert.match(t.sync.message, /waiting for healthy state of wavegate\.dev\/WaveGate\/forgejo-ready/);
    // Wave 0 is a bare Pod: judged from the compact pod view (never the whole pod), which also
    // keeps when Argo CD last changed it, so its wave is dated like the others.
    assert.deepEqual(t.waves.map(w => [w.wave, w.applied]), [[0, 'applied'], [1, 'applied'], [2, 'applied'], [3, 'pending']]);
    const at = t.waves.slice(0, 3).map(w => Date.parse(w.appliedAt));
    assert.ok(at[0] >= Date.parse(t.sync.startedAt) && at[0] < at[1] && at[1] < at[2], `applied in wave order after the start: ${JSON.stringify(t.waves.map(w => w.appliedAt))}`);
    assert.match(t.blockingReason, /Service cicd\/forgejo is (Progressing|Degraded).*app=forgejo/);
  });

  test('the dashboard draws the timeline with the blocking wave and its reason, and follows the fix', async () => {
    const { context, page } = await newPage();
    await page.goto(BASE.href);
    const fig = page.locator(DASH_FIG);
    let t;
    await eventually(async () => { t = await timeline(); return t.blockingWave === 1 && !mismatch(await readDrawn(page, DASH_FIG), t); },
      { what: 'the dashboard timeline to match the API with wave 1 blocking' });
    let drawn = await readDrawn(page, DASH_FIG);
    assertGeometry(drawn, t);
    assert.equal(drawn[1].bars, 1, 'wave 1 has a bar from its apply to now');
    assert.match(drawn[1].reason, /forgejo/);
    assert.match(drawn[3].times, /not applied yet/);
    assert.equal(drawn[3].bars, 0, 'no bar for a wave Argo CD has not reached');
    assert.equal(drawn.filter(d => d.healthyMarks).length, 0, 'nothing is marked healthy at a time before the fix');
    assert.match(await page.locator(`${DASH_FIG} [data-testid="timeline-caption"]`).textContent(), /Running — Argo CD: “waiting for healthy state/);
    const svgLabel = await page.locator(`${DASH_FIG} svg`).getAttribute('aria-labelledby');
    assert.ok(svgLabel, 'the picture has an accessible name and description');
    await shoot(fig, 'timeline-dashboard-before-fix');

    // A running sync's timeline moves on every refresh; the rest of the card stays the same nodes
    // (text selection and focus survive).
    const axisEnd = page.locator(`${DASH_FIG} [data-testid="timeline-axis-end"]`);
    const endBefore = await axisEnd.textContent();
    await page.evaluate(() => { document.querySelector('[data-testid="app-argocd/platform"] h3').__kept = true; });
    await eventually(async () => (await axisEnd.textContent()) !== endBefore, { ms: 10000, what: 'the running sync\'s timeline to move on' });
    assert.equal(await page.evaluate(() => document.querySelector('[data-testid="app-argocd/platform"] h3').__kept === true), true,
      'the card\'s heading was rebuilt although only the timeline changed');

    // The fix: the gate turns Ready, and its wave gets a healthy mark at the gate's transition.
    await setForgejoSelector('gitea');
    await eventually(async () => {
      t = await timeline();
      return t.waves[2].healthy === 'healthy' && !mismatch(await readDrawn(page, DASH_FIG), t);
    }, { ms: 20000, what: 'wave 2 (the gate) drawn truly healthy at its Ready transition' });
    drawn = await readDrawn(page, DASH_FIG);
    assertGeometry(drawn, t);
    assert.equal(drawn[2].healthyMarks, 1);
    assert.ok(drawn[2].healthyBox > drawn[2].appliedBox, 'the gate became healthy after it was applied');
    assert.equal(drawn[1].healthy, 'timeUnknown', 'the Service is healthy, with no invented time');
    assert.match(drawn[1].times, /time not recorded/);
    assert.equal(t.blockingWave, 3, 'the Database in wave 3 now holds the rollout');
    assert.ok(drawn[3].blocking && /Database ddb\/forgejo/.test(drawn[3].reason), JSON.stringify(drawn[3]));
    await shoot(fig, 'timeline-dashboard-after-fix');
    await context.close();
    await setForgejoSelector('forgejo');
  });

  test('the Waves tab of the UI extension draws the same timeline', async () => {
    const { context, page } = await newPage();
    await page.goto(harness.url);
    await page.waitForFunction(() => window.__harnessReady === true);
    let t;
    await eventually(async () => { t = await timeline(); return !mismatch(await readDrawn(page, EXT_FIG), t); },
      { what: 'the Waves tab timeline to match the API' });
    const drawn = await readDrawn(page, EXT_FIG);
    assertGeometry(drawn, t);
    assert.equal(drawn.filter(d => d.blocking).length, t.blockingWave == null ? 0 : 1);
    await shoot(page.locator(EXT_FIG), 'timeline-extension');
    await context.close();
  });

  test('loads nothing from other hosts and throws no script errors', () => {
    assert.deepEqual(foreign, [], 'requests to non-local hosts');
    assert.deepEqual(pageErrors, [], 'uncaught errors in the page');
  });
});
