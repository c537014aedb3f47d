// The waves table and timeline model both UIs draw (ui/waves.js: wavesTable, timelineLayout and
// the small helpers) as pure functions: a waves answer in, the rows and SVG shapes out. No browser
// and no wavegate: `node --test tests/browser/waves-model.test.mjs`. The dashboard is served with
// this file spliced in and the extension carries a copy; tests/offline/ui.rs holds the copy to it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const NAMES = ['statusOf', 'resourceName', 'ROWS_AT_ONCE', 'resourceCount', 'blockingLine', 'wavesTable', 'timelineOf', 'timelineCaption', 'timelineLayout', 'readAnswer', 'answerAt'];
// ui/waves.js is function declarations meant for the inside of each UI's own closure.
const model = new Function(fs.readFileSync(path.join(REPO, 'ui/waves.js'), 'utf8') +
  '\nreturn { ' + NAMES.join(', ') + ' };')();
const { statusOf, resourceName, ROWS_AT_ONCE, resourceCount, blockingLine, wavesTable, timelineOf, timelineCaption, timelineLayout, readAnswer, answerAt } = model;

test('the layout draws every state the API can send, and times only what has a time', () => {
  const wave = (n, o) => ({ wave: n, status: 'Healthy', applied: 'applied', appliedAt: null, appliedNote: 'note ' + n,
    healthy: 'timeUnknown', healthyAt: null, healthyNote: '', blocking: false, ...o });
  const t = {
    sync: { phase: 'Failed', startedAt: '2026-12-01T03:00:00Z', finishedAt: '2026-12-01T03:10:00Z', message: 'one or more objects failed to apply' },
    now: '2026-12-01T03:20:00Z', blockingWave: 2,
    waves: [
      wave(-1, { appliedAt: '2026-12-01T03:00:01Z', healthy: 'healthy', healthyAt: '2026-11-30T00:00:00Z' }), // healthy before it was applied
      wave(0, { applied: 'unchanged' }),
      wave(1, { applied: 'unknown', appliedNote: 'Widget w: does not exist' }),
      wave(2, { applied: 'failed', appliedNote: "Argo CD's apply failed (SyncFailed) for Job j", status: 'Degraded', healthy: 'notHealthy',
        blocking: true, reason: 'Job ns/j is Degraded: ' + 'x'.repeat(300) }),
      wave(3, { applied: 'notInSync', status: 'Progressing', healthy: 'notHealthy' }),
    ],
  };
  const l = timelineLayout(t);
  const rows = l.shapes.filter(s => s.tag === 'g');
  assert.deepEqual(rows.map(r => r.attrs['data-wave']), ['-1', '0', '1', '2', '3']);
  const kids = (r, id) => r.children.filter(c => c.attrs['data-testid'] === id);
  const words = r => kids(r, 'timeline-times')[0].text;
  assert.equal(kids(rows[0], 'timeline-bar').length, 1);
  assert.match(words(rows[0]), /already before this apply/);
  for (const i of [1, 2, 3, 4]) assert.equal(kids(rows[i], 'timeline-bar').length, 0, `no bar without an applied time (wave ${rows[i].attrs['data-wave']})`);
  assert.match(words(rows[1]), /without changes/);
  assert.match(words(rows[2]), /time unknown: Widget w: does not exist/);
  assert.match(words(rows[3]), /SyncFailed/);
  assert.match(words(rows[4]), /not part of the last sync/);
  const reason = kids(rows[3], 'timeline-reason');
  assert.equal(reason.length, 2, 'a long reason takes two lines, cut with an ellipsis');
  assert.match(reason[1].text, /…$/);
  assert.equal(reason[0].title, t.waves[3].reason, 'the whole reason is in the tooltip');
  assert.ok(l.shapes.some(s => s.attrs['data-testid'] === 'timeline-axis-end' && /sync finished/.test(s.text)));
  // No operation recorded: a sentence, no axis times.
  const none = timelineLayout({ sync: null, now: t.now, blockingWave: null, waves: [wave(0, { applied: 'unknown' })] });
  assert.match(none.shapes[0].text, /no sync operation/);
});

// A part of a batch is served with the batch's `now`, taken before it was judged: its sync may
// have started, and its waves been applied, after that `now`. The axis then ends at the latest
// time the view names, and calls no time "now" that is not the timeline's now.
test('the axis end says (now) only at the timeline\'s now', () => {
  const wave = o => ({ wave: 0, status: 'Progressing', applied: 'applied', appliedAt: null, appliedNote: '',
    healthy: 'notHealthy', healthyAt: null, healthyNote: '', blocking: true, reason: 'r', ...o });
  const end = t => timelineLayout(t).shapes.find(s => s.attrs['data-testid'] === 'timeline-axis-end').text;
  const running = { phase: 'Running', startedAt: '2026-12-01T03:00:00Z', message: '' };
  assert.equal(end({ sync: running, now: '2026-12-01T03:00:30Z', blockingWave: 0, waves: [wave({ appliedAt: '2026-12-01T03:00:10Z' })] }),
    '+30s (now)');
  // Started after `now`: the axis is a second long, from the start, and no end of it is now.
  assert.equal(end({ sync: { ...running, startedAt: '2026-12-01T03:00:02Z' }, now: '2026-12-01T03:00:00Z', blockingWave: 0, waves: [wave()] }),
    '+1s');
  // Applied after `now`: the axis reaches the applied time, which is not now either.
  assert.equal(end({ sync: running, now: '2026-12-01T03:00:05Z', blockingWave: 0, waves: [wave({ appliedAt: '2026-12-01T03:00:07Z' })] }),
    '+7s');
  const finished = { ...running, phase: 'Succeeded', finishedAt: '2026-12-01T03:00:20Z' };
  assert.equal(end({ sync: finished, now: '2026-12-01T03:01:00Z', blockingWave: null, waves: [wave({ appliedAt: '2026-12-01T03:00:10Z' })] }),
    '+20s (sync finished)');
});

const resource = (kind, name, o) => ({ group: '', version: 'v1', kind, namespace: 'cicd', name, status: 'Healthy', message: '', judgedBy: 'wavegate', ...o });
const finding = (wave, rule) => ({ rule, level: 'warning', message: rule + ' in ' + wave, why: 'w', fix: 'f', wave });

test('the table: waves in order, the blocking one marked, findings in the wave of their object', () => {
  const w = {
    blockingWave: 1, message: 'wave 1 is not truly healthy',
    waves: [
      { wave: 0, status: 'Healthy', resources: [resource('Pod', 'forgejo-0')] },
      { wave: 1, status: 'Degraded', resources: [
        resource('Service', 'forgejo', { status: 'Degraded', message: 'selects app=forgejo, which matches no pods' }),
        resource('Database', 'forgejo', { group: 'postgresql.cnpg.io', namespace: 'ddb', status: 'Progressing', judgedBy: 'argocd-lua:postgresql.cnpg.io/Database',
          argoStatus: { status: 'Degraded', message: 'not ready' } }),
        resource('Job', 'seed', { status: 'Healthy', judgedBy: 'argocd-lua:batch/Job', argoStatus: { status: 'Healthy' } })] },
    ],
    lint: { findings: [finding(1, 'same-wave'), finding(7, 'no-wave')], skipped: '', note: 'cannot read Secrets' },
  };
  const t = wavesTable(w, false, () => assert.fail('not grouped: nobody asks what was opened'));
  assert.equal(t.empty, null);
  assert.deepEqual(t.waves.map(x => [x.wave, x.blocking, x.open, x.count, x.toggle]),
    [[0, false, true, ' \u00b7 1 resource', null], [1, true, true, ' \u00b7 3 resources', null]]);
  const [svc, db, job] = t.waves[1].resources;
  assert.equal(svc.name, 'Service cicd/forgejo');
  assert.equal(svc.id, 'Service-cicd-forgejo');
  assert.equal(db.name, 'Database.postgresql.cnpg.io ddb/forgejo');
  assert.equal(db.argo, 'Argo CD: Degraded \u2014 not ready', "Argo CD's own verdict when it differs");
  assert.equal(job.argo, '', 'nothing when Argo CD says the same');
  assert.deepEqual(t.waves[1].findings.map(f => f.rule), ['same-wave']);
  assert.deepEqual(t.waves[0].findings, []);
  assert.deepEqual(t.findings.map(f => f.rule), ['no-wave'], 'a finding about an object in no listed wave goes after the waves');
  assert.equal(t.note, 'lint: cannot read Secrets');
  assert.equal(t.skipped, '');
  assert.equal(wavesTable({ waves: [] }, false).empty, 'No resources with sync waves.');
});

test('a big application draws the rows of the blocking wave, and of the waves the user opened', () => {
  const many = n => Array.from({ length: n }, (_, i) => resource('ConfigMap', 'c' + i));
  const w = { blockingWave: 2, waves: [0, 1, 2].map(n => ({ wave: n, status: n === 2 ? 'Progressing' : 'Healthy', resources: many(ROWS_AT_ONCE) })) };
  assert.equal(resourceCount(w), 3 * ROWS_AT_ONCE);
  const untouched = wavesTable(w, true, () => undefined);
  assert.deepEqual(untouched.waves.map(x => [x.open, x.resources.length, x.toggle]),
    [[false, 0, 'Show resources'], [false, 0, 'Show resources'], [true, ROWS_AT_ONCE, 'Hide resources']]);
  const chosen = wavesTable(w, true, wave => ({ 0: true, 2: false })[wave]);
  assert.deepEqual(chosen.waves.map(x => x.open), [true, false, false]);
  assert.equal(chosen.waves[1].count, ' \u00b7 ' + ROWS_AT_ONCE + ' resources', 'a closed wave still says how many it holds');
});

test('the blocking line names the wave and why, or says none blocks', () => {
  assert.deepEqual(blockingLine(3, 'Database ddb/forgejo is Progressing'),
    { wave: '3', clear: false, title: 'Blocking wave: 3', detail: ' \u2014 Database ddb/forgejo is Progressing' });
  assert.deepEqual(blockingLine(0, ''), { wave: '0', clear: false, title: 'Blocking wave: 0', detail: '' }, 'wave 0 blocks too');
  assert.deepEqual(blockingLine(null, null), { wave: 'none', clear: true, title: 'No blocking wave', detail: ' \u2014 all waves truly healthy' });
});

test('a status this UI does not know is coloured Unknown; a view without waves draws no timeline', () => {
  assert.equal(statusOf('Healthy'), 'Healthy');
  assert.equal(statusOf('Hibernating'), 'Unknown');
  assert.equal(resourceName({ kind: 'Namespace', name: 'cicd' }), 'Namespace cicd');
  assert.equal(timelineOf({ timeline: { waves: [] } }), null);
  assert.equal(timelineOf(null), null);
  assert.match(timelineCaption({ phase: 'Running', revision: '0123456789abcdef', message: 'waiting for healthy state' }),
    /^Last sync of 0123456: Running \u2014 Argo CD: \u201cwaiting for healthy state\u201d \u00b7 applied = /);
  assert.match(timelineCaption(null), /^No sync recorded by Argo CD \u00b7 /);
});

test('a poll that differs from the last only in the server clock keeps every part but the timeline', () => {
  const answer = (now, status, message) => JSON.stringify({
    namespace: 'cicd', name: 'forgejo', blockingWave: 1, message: message || 'Service cicd/forgejo selects no pods',
    waves: [{ wave: 1, status: status || 'Progressing', resources: [resource('Service', 'forgejo')] }],
    lint: { findings: [] },
    timeline: { now, sync: { phase: 'Succeeded', startedAt: '2026-12-01T03:00:00Z', finishedAt: '2026-12-01T03:01:00Z' }, waves: [] },
  });
  const first = readAnswer(answer('2026-12-06T01:00:00Z'), null);
  assert.deepEqual(first.value, JSON.parse(answer('2026-12-06T01:00:00Z')));
  assert.equal(readAnswer(first.text, first), first, 'the same bytes are the same answer');
  const later = readAnswer(answer('2026-12-06T01:00:02Z'), first);
  assert.deepEqual(later.value, JSON.parse(answer('2026-12-06T01:00:02Z')));
  assert.equal(later.value.waves, first.value.waves, 'the waves are kept');
  assert.equal(later.value.lint, first.value.lint);
  assert.equal(later.value.timeline.sync, first.value.timeline.sync);
  assert.equal(first.value.timeline.now, '2026-12-06T01:00:00Z', 'the earlier value is left as it was');
  // Anything else that changed is read anew, even when the clock did not move.
  for (const [text, what] of [
    [answer('2026-12-06T01:00:02Z', 'Healthy'), 'a status'],
    [answer('2026-12-06T01:00:04Z', undefined, 'the "now":"later" of a message'), 'a message quoting the key'],
    [answer('2026-12-06T01:00:02Z', undefined, 'Service cicd/forgejo selects no pods.'), 'a longer message'],
  ]) {
    const next = readAnswer(text, later);
    assert.deepEqual(next.value, JSON.parse(text), what);
    assert.notEqual(next.value.waves, later.value.waves, what + ': read anew');
  }
  // Another "now" key anywhere, or none, is never taken for the clock.
  const twice = first.text.replace('"lint":{', '"lint":{"now":"x",');
  const again = readAnswer(twice.replace('01:00:00Z', '01:00:09Z'), readAnswer(twice, null));
  assert.deepEqual(again.value, JSON.parse(twice.replace('01:00:00Z', '01:00:09Z')));
  const none = JSON.stringify({ waves: [], timeline: null });
  assert.deepEqual(readAnswer(none, readAnswer(none.replace('[]', '[1]'), null)).value, JSON.parse(none));

  // A 304: the same answer at a later time, as if its bytes had come again; the tag stays.
  const held = { ...readAnswer(answer('2026-12-06T01:00:00Z'), null), etag: 'W/"a"' };
  const served = answerAt(held, '2026-12-06T01:00:05Z');
  assert.deepEqual(served.value, JSON.parse(answer('2026-12-06T01:00:05Z')));
  assert.equal(served.text, answer('2026-12-06T01:00:05Z'), 'the next 200 is compared with the new time');
  assert.equal(served.value.waves, held.value.waves, 'the waves are kept');
  assert.equal(served.etag, 'W/"a"');
  assert.equal(held.value.timeline.now, '2026-12-06T01:00:00Z', 'the held value is left as it was');
  // 304 after 304, with a time of another length: each spliced where the last one put it, and
  // a 200 of the same answer after them is taken as the same answer.
  const twiceHeld = answerAt(answerAt(held, '2026-12-06T01:00:05.250Z'), '2026-12-06T01:00:10Z');
  assert.equal(twiceHeld.text, answer('2026-12-06T01:00:10Z'));
  assert.deepEqual(twiceHeld.value, JSON.parse(answer('2026-12-06T01:00:10Z')));
  assert.equal(twiceHeld.value.waves, held.value.waves);
  const thenBody = readAnswer(answer('2026-12-06T01:00:12Z'), twiceHeld);
  assert.equal(thenBody.value.waves, held.value.waves, 'a body differing only in the time keeps the waves');
  assert.equal(thenBody.value.timeline.now, '2026-12-06T01:00:12Z');
  assert.equal(answerAt(held, '2026-12-06T01:00:00Z'), held, 'the same time: the same answer');
  // A time that is not a plain timestamp (a proxy's header, a forged one) changes nothing.
  for (const bad of [null, '', '2026"},"waves":[],"x":{"a":"', '01:00\\u0022', 'x'.repeat(65)]) {
    assert.equal(answerAt(held, bad), held, String(bad));
  }
  assert.equal(answerAt(readAnswer(none, null), '2026-12-06T01:00:05Z').value.timeline, null, 'no timeline: nothing to move');
});
