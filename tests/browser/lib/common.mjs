// Shared by the browser tests: where wavegate is, where screenshots go, how chromium starts,
// and the guard that keeps every page request on this machine.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

export const BROWSER_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const REPO = path.resolve(BROWSER_DIR, '..', '..');
export const SCREENSHOTS = path.join(process.env.TEST_OUTPUT || path.join(REPO, 'test-output'), 'screenshots');
export const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';

// These tests exist to run against a real `wavegate serve`; without one they must fail, not skip,
// so a CI that forgot to start it goes red.
export function wavegateUrl() {
  const raw = process.env.WAVEGATE_URL;
  if (!raw) {
    throw new Error('WAVEGATE_URL is not set: these browser tests need a running `wavegate serve` ' +
      '(e.g. WAVEGATE_URL=http://127.0.0.1:8080/) with the seed scenarios loaded; see tests/browser/README.md');
  }
  const url = new URL(raw);
  if (!url.pathname.endsWith('/')) url.pathname += '/';
  return url;
}

// wavegate's bearer token, if the server was started with one.
export const WAVEGATE_TOKEN = process.env.WAVEGATE_TOKEN || '';

export async function launch() {
  if (!fs.existsSync(CHROMIUM)) {
    throw new Error(`${CHROMIUM} not found: run tests/browser/install.sh (Debian's chromium package)`);
  }
  return chromium.launch({ executablePath: CHROMIUM, headless: true });
}

export async function screenshot(page, name) {
  fs.mkdirSync(SCREENSHOTS, { recursive: true });
  const file = path.join(SCREENSHOTS, name + '.png');
  await page.screenshot({ path: file, fullPage: true });
  return file;
}

const LOCAL_HOSTS = new Set(['127.0.0.1', 'localhost', '[::1]', '::1']);
export function isLocal(url) {
  let u;
  try { u = new URL(url); } catch { return false; }
  if (u.protocol === 'data:' || u.protocol === 'blob:' || u.protocol === 'about:') return true;
  return LOCAL_HOSTS.has(u.hostname) || /^127\./.test(u.hostname);
}

// Every request the context makes goes through here; anything for another host is aborted and
// recorded in `foreign`, and the test asserts the list stays empty.
export async function guardNetwork(context, foreign) {
  await context.route('**/*', route => {
    const url = route.request().url();
    if (isLocal(url)) return route.continue();
    foreign.push(url);
    return route.abort('blockedbyclient');
  });
  return foreign;
}

// Fetches wavegate's API directly from node (with the token if there is one).
export async function apiGet(base, rel, headers = {}) {
  const h = { Accept: 'application/json', ...headers };
  if (WAVEGATE_TOKEN) h.Authorization = 'Bearer ' + WAVEGATE_TOKEN;
  const res = await fetch(new URL(rel, base), { headers: h });
  const text = await res.text();
  let body;
  try { body = JSON.parse(text); } catch { body = text; }
  return { status: res.status, body };
}

// Polls `fn` until it returns a truthy value or `ms` pass; the last value is in the error.
export async function eventually(fn, { ms = 15000, every = 250, what = 'condition' } = {}) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    try { last = await fn(); if (last) return last; } catch (e) { last = e; }
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}; last: ${last instanceof Error ? last.message : JSON.stringify(last)}`);
    await new Promise(r => setTimeout(r, every));
  }
}
