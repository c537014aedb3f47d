// The dashboard at wavegate's `/`, in headless chromium, against a real `wavegate serve`.
//
// Needs (see README.md): WAVEGATE_URL, KUBECONFIG for the cluster that wavegate watches, and the
// seed scenario "forgejo selector": Service cicd/forgejo selects app=forgejo while its only pod
// cicd/forgejo-0 is labelled app=gitea; WaveGate cicd/forgejo-ready checks that Service (check
// forgejo-http); Application argocd/platform has the Service in wave 1, the gate in wave 2, and
// Forgejo's Deployment in wave 3 with the CNPG Database and Cluster it uses.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { wavegateUrl, WAVEGATE_TOKEN, launch, screenshot, guardNetwork, apiGet, eventually } from './lib/common.mjs';

const run = promisify(execFile);
const KUBECTL = process.env.KUBECTL || 'kubectl';
const BASE = wavegateUrl(); // throws (fails the file) when WAVEGATE_URL is unset
const GATE = '[data-testid="gate-cicd/forgejo-ready"]';
const APP = '[data-testid="app-argocd/platform"]';

async function kubectl(...args) {
  if (!process.env.KUBECONFIG) throw new Error('KUBECONFIG is not set: the dashboard test edits the scenario with kubectl');
  try {
    const { stdout } = await run(KUBECTL, args, { env: process.env, timeout: 20000 });
    return stdout;
  } catch (e) {
    throw new Error(`kubectl ${args.join(' ')} failed: ${e.stderr || e.message}`);
  }
}
const setForgejoSelector = app =>
  kubectl('-n', 'cicd', 'patch', 'service', 'forgejo', '--type', 'merge', '-p', JSON.stringify({ spec: { selector: { app } } }));

// Starts each page with wavegate's token (if the server has one) so only the 401 test sees a prompt.
async function newContext(browser) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  if (WAVEGATE_TOKEN) await context.addInitScript(t => sessionStorage.setItem('wavegate.token', t), WAVEGATE_TOKEN);
  return context;
}

describe('dashboard', () => {
  let browser;
  const foreign = [];
  const pageErrors = [];
  // The page runs under wavegate's Content-Security-Policy; anything it blocks is a bug.
  const cspViolations = [];

  async function open(context, url = BASE.href) {
    await guardNetwork(context, foreign);
    const page = await context.newPage();
    page.on('pageerror', e => pageErrors.push(e.message));
    page.on('console', m => { if (/Content Security Policy/i.test(m.text())) cspViolations.push(m.text()); });
    const response = await page.goto(url);
    const csp = response.headers()['content-security-policy'] || '';
    assert.match(csp, /frame-ancestors 'none'/, 'the dashboard is sent with a CSP that forbids framing');
    assert.equal(response.headers()['x-content-type-options'], 'nosniff');
    return page;
  }

  before(async () => {
    await eventually(async () => (await apiGet(BASE, 'readyz')).status === 200,
      { ms: 30000, every: 500, what: `wavegate at ${BASE} to answer /readyz with 200` });
    // Start from the scenario's broken state even if an earlier run fixed it.
    await setForgejoSelector('forgejo');
    browser = await launch();
  });

  after(async () => {
    await browser?.close();
    await setForgejoSelector('forgejo').catch(() => {}); // leave the seed as we found it
  });

  test('shows the broken forgejo gate, then turns Healthy without a reload once the selector is fixed', async () => {
    const context = await newContext(browser);
    // The page asks the waves views of its Applications in one request a refresh
    // (api/v1/applications/waves), sending back each view's ETag: a part whose view did not
    // change is 304 without a body. Counted here, so that the fix below also proves a view that
    // did change is never held back; and no view is asked alone (none is judged elsewhere here).
    const unchanged = [], alone = [];
    context.on('response', async r => {
      const path = new URL(r.url()).pathname;
      if (/\/api\/v1\/applications\/[^/]+\/[^/]+\/waves$/.test(path)) alone.push(r.url());
      if (/\/api\/v1\/applications\/waves$/.test(path) && r.status() === 200) {
        const body = await r.json().catch(() => null);
        if (body && body.applications.some(a => a.status === 304 && !a.waves)) unchanged.push(r.url());
      }
    });
    const page = await open(context);

    // Before: the gate is not Healthy and says which pod was probably meant.
    await eventually(async () => {
      const status = await page.locator(`${GATE} [data-testid="gate-status"]`).getAttribute('data-status', { timeout: 1000 });
      const message = await page.locator(`${GATE} [data-testid="check-forgejo-http"] [data-testid="check-message"]`).textContent({ timeout: 1000 });
      return status && status !== 'Healthy' && /gitea/.test(message) && { status, message };
    }, { ms: 15000, what: 'gate cicd/forgejo-ready shown as not Healthy with a message naming gitea' });
    const checkStatus = await page.locator(`${GATE} [data-testid="check-forgejo-http"] [data-testid="check-status"]`).textContent();
    assert.notEqual(checkStatus.trim(), 'Healthy');
    assert.match(checkStatus, /Progressing|Degraded|Unknown|Missing|Suspended/, 'status is printed as a word, not only a colour');

    // The application's first blocking wave is the Service's wave, with its reason.
    const blocking = page.locator(`${APP} [data-testid="blocking-wave"]`);
    await eventually(async () => (await blocking.getAttribute('data-wave', { timeout: 1000 })) === '1',
      { what: 'application argocd/platform blocking at wave 1' });
    assert.match(await blocking.textContent(), /Blocking wave: 1/);
    assert.match(await blocking.textContent(), /forgejo/, 'the blocking line gives the reason');
    assert.notEqual(await page.locator(`${APP} [data-testid="wave-1"]`).getAttribute('data-status'), 'Healthy');
    // wavegate lint on the live objects, beside the waves they hold: Forgejo uses database
    // forgejo, which is in its own wave 3; the Service of wave 1 selects no pod template.
    const sameWave = page.locator(`${APP} [data-testid="wave-3"] [data-testid="finding-same-wave"] [data-testid="finding-message"]`);
    const waves = (await apiGet(BASE, 'api/v1/applications/argocd/platform/waves')).body;
    const apiSameWave = ((waves.lint || {}).findings || []).find(f => f.rule === 'same-wave');
    assert.ok(apiSameWave, `the API reports the same-wave finding: ${JSON.stringify(waves.lint)}`);
    await eventually(async () => (await sameWave.textContent({ timeout: 1000 })) === apiSameWave.message,
      { what: 'the same-wave finding shown in wave 3 as the API words it' });
    assert.match(apiSameWave.message, /Deployment cicd\/forgejo \(wave 3\) uses database forgejo of Cluster pg.*Database ddb\/forgejo is applied in wave 3/);
    const selectorFinding = page.locator(`${APP} [data-testid="wave-1"] [data-testid="finding-selector-matches-nothing"]`);
    assert.equal(await selectorFinding.count(), 1, 'the selector finding is shown in the Service\'s wave 1');
    assert.match(await selectorFinding.textContent(), /app=forgejo.*gitea/);
    await screenshot(page, 'dashboard-before-fix');

    await eventually(async () => unchanged.length > 0,
      { ms: 15000, what: 'a refresh whose batch answered an unchanged view 304 Not Modified' });
    assert.deepEqual(alone, [], 'waves views the page asked for one at a time');

    // Fix the scenario the way a person would; the page must follow by itself.
    await page.evaluate(() => { window.__sameDocument = true; });
    await setForgejoSelector('gitea');
    const started = Date.now();
    await eventually(async () =>
      (await page.locator(`${GATE} [data-testid="gate-status"]`).getAttribute('data-status', { timeout: 1000 })) === 'Healthy',
    { ms: 15000, what: 'gate cicd/forgejo-ready shown as Healthy after the selector fix' });
    const took = Date.now() - started;
    assert.equal(await page.evaluate(() => window.__sameDocument), true, 'the page was reloaded');
    assert.equal(await page.locator(`${GATE} [data-testid="check-forgejo-http"]`).getAttribute('data-status'), 'Healthy');
    await eventually(async () => (await blocking.getAttribute('data-wave', { timeout: 1000 })) !== '1',
      { ms: 10000, what: 'wave 1 no longer blocking' });
    await eventually(async () => (await selectorFinding.count()) === 0,
      { ms: 10000, what: 'the selector finding gone once the selector matches the pod template' });
    assert.equal(await sameWave.count(), 1, 'the same-wave finding stays: the selector fix does not move Forgejo');
    assert.match(await page.getByTestId('last-updated').textContent(), /Last updated/);
    await screenshot(page, 'dashboard-after-fix');
    console.log(`# gate turned Healthy on the page ${took} ms after the fix`);
    await context.close();
  });

  test('is usable with the keyboard', async () => {
    const context = await newContext(browser);
    const page = await open(context);
    await page.locator(GATE).waitFor();
    const reached = [];
    for (let i = 0; i < 6; i++) {
      await page.keyboard.press('Tab');
      const el = await page.evaluate(() => {
        const a = document.activeElement;
        const cs = getComputedStyle(a);
        return { testid: a.getAttribute('data-testid'), tag: a.tagName, outline: cs.outlineStyle, width: cs.outlineWidth };
      });
      if (el.testid) reached.push(el);
    }
    const ids = reached.map(r => r.testid);
    assert.ok(ids.includes('refresh') && ids.includes('pause'), `Tab should reach Refresh and Pause, reached ${JSON.stringify(ids)}`);
    for (const r of reached) assert.notEqual(r.outline, 'none', `focus on ${r.testid} has no visible outline`);

    // Keyboard activation of the toggle.
    await page.getByTestId('pause').focus();
    await page.keyboard.press('Enter');
    assert.equal(await page.getByTestId('pause').getAttribute('aria-pressed'), 'true');
    assert.match(await page.getByTestId('last-updated').textContent(), /paused/);
    await page.keyboard.press('Space');
    assert.equal(await page.getByTestId('pause').getAttribute('aria-pressed'), 'false');

    // Semantics a screen reader needs: headings and header cells with scope.
    assert.equal(await page.locator('h1').count(), 1);
    assert.ok(await page.locator('h2').count() >= 2);
    assert.ok(await page.locator(`${GATE} th[scope="col"]`).count() >= 4);
    assert.ok(await page.locator(`${GATE} th[scope="row"]`).count() >= 1);
    await context.close();
  });

  test('shows a clear error line while the API is unreachable, and recovers', async () => {
    const context = await newContext(browser);
    const page = await open(context);
    await page.locator(GATE).waitFor();
    await page.route(/\/api\/v1\/gates$/, route => route.abort('connectionrefused'));
    const error = page.getByTestId('error');
    await eventually(async () => /unreachable/.test(await error.textContent({ timeout: 1000 })) && await error.isVisible(),
      { ms: 8000, what: 'the error line' });
    assert.match(await error.textContent(), /showing gates from/, 'last good data stays on screen and says how old it is');
    assert.equal(await page.locator(GATE).count(), 1, 'the last good gates stay on screen');
    assert.equal(await page.locator(APP).count(), 1, 'applications still refresh while only gates fail');
    await screenshot(page, 'dashboard-api-unreachable');
    await page.unroute(/\/api\/v1\/gates$/);
    await eventually(async () => !(await error.isVisible()), { ms: 8000, what: 'the error line to go away' });

    // An error answer from wavegate is shown with its message.
    await page.route(/\/api\/v1\/applications$/, route =>
      route.fulfill({ status: 404, contentType: 'application/json', body: JSON.stringify({ error: 'simulated: no such thing' }) }));
    await eventually(async () => /HTTP 404: simulated: no such thing/.test(await error.textContent({ timeout: 1000 })),
      { ms: 8000, what: 'the API error message' });
    await context.close();
  });

  // A batch that fails as a whole (no answer in time, a replica without the route during an
  // upgrade) must not blank the applications: each view is asked alone, as before the batch.
  test('asks each view alone when the batch of a page fails, and shows no error for it', async () => {
    const context = await newContext(browser);
    const page = await open(context);
    await page.locator(APP).waitFor();
    const alone = [];
    page.on('response', r => {
      if (/\/api\/v1\/applications\/[^/]+\/[^/]+\/waves$/.test(new URL(r.url()).pathname) && r.status() < 400) alone.push(r.url());
    });
    await page.route(/\/api\/v1\/applications\/waves\?/, route => route.abort('connectionrefused'));
    await eventually(async () => alone.some(u => /\/argocd\/platform\/waves$/.test(u)),
      { ms: 8000, what: 'the platform view asked alone' });
    await page.waitForTimeout(2500);
    const error = page.getByTestId('error');
    assert.ok(!(await error.isVisible()), 'no error line while the views are asked alone: ' + await error.textContent());
    assert.equal(await page.locator(APP).count(), 1, 'the application card stays');
    assert.match(await page.locator(APP).textContent(), /forgejo/i, 'its waves are still drawn');
    await context.close();
  });

  test('asks for a token when the API answers 401 and sends it as a bearer token', async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    await guardNetwork(context, foreign);
    const page = await context.newPage();
    page.on('pageerror', e => pageErrors.push(e.message));
    const TOKEN = 'browser-test-token';
    const seen = [];
    // Plays a wavegate that requires TOKEN; accepted requests go on to the real server (with the
    // real server's token, if it has one).
    await page.route(/\/api\/v1\//, route => {
      const auth = route.request().headers()['authorization'] || '';
      seen.push(auth);
      if (auth !== 'Bearer ' + TOKEN) {
        return route.fulfill({ status: 401, contentType: 'application/json', body: JSON.stringify({ error: 'missing or invalid bearer token' }) });
      }
      const headers = { ...route.request().headers() };
      if (WAVEGATE_TOKEN) headers.authorization = 'Bearer ' + WAVEGATE_TOKEN; else delete headers.authorization;
      return route.continue({ headers });
    });
    await page.goto(BASE.href);
    const input = page.getByTestId('token-input');
    await input.waitFor({ state: 'visible', timeout: 8000 });
    assert.match(await page.getByTestId('error').textContent(), /401/);
    await screenshot(page, 'dashboard-token-prompt');

    await input.focus();
    await page.keyboard.type(TOKEN);
    await page.keyboard.press('Enter');
    await page.locator(GATE).waitFor({ timeout: 8000 });
    assert.equal(await page.getByTestId('auth').isVisible(), false);
    assert.equal(await page.evaluate(() => sessionStorage.getItem('wavegate.token')), TOKEN);
    assert.ok(seen.includes('Bearer ' + TOKEN), 'the token is sent as Authorization: Bearer');
    await context.close();
  });

  test('loads nothing from other hosts and throws no script errors', () => {
    assert.deepEqual(foreign, [], 'requests to non-local hosts');
    assert.deepEqual(pageErrors, [], 'uncaught errors in the page');
    assert.deepEqual(cspViolations, [], 'Content-Security-Policy violations');
  });
});
