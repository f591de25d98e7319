// The controls column, built from the preset's control list: send work (upload.js), break it (kill a
// worker, start a fault, cut a lease), the settings (settings.js), the clock (clock.js), the lab
// (lab.js) and dead-letter replay; plus the scenario buttons above the panels.

import { errorText, fmtT, h, section, setText, statusLine } from './util.js';

export function install(W) {
  const { S, els, q, preset } = W;

  function buildControls() {
    const box = q('controls');
    if (S.lab.viewer) {
      box.append(section('Controls', h('p', { class: 'lw-doc' },
        'This is a read-only view. The instructor drives the lab; you watch it live.')));
      return;
    }
    const c = S.controls;
    if (c.has('upload')) box.append(W.buildUpload());
    if (c.has('kill') || c.has('faults')) box.append(buildBreak());
    const settingNames = [...c].filter((n) => S.schema.has(n) && n !== 'speed'); // speed lives in Clock
    if (settingNames.length) {
      els.fields = {};
      box.append(section('Settings', ...settingNames.map((n) => W.buildSetting(S.schema.get(n)))));
    }
    if (c.has('clock') || c.has('speed')) box.append(W.buildClock(c.has('clock')));
    box.append(W.buildLabSection());
    if (c.has('dlq')) buildDlqActions();
  }

  // ---- break it: kill a worker, start a fault, cut a lease short -----------------------------
  const faultText = (f) => (S.meta.fault_text || {})[f] || { label: f, doc: '' };

  function buildBreak() {
    const kids = [];
    if (S.controls.has('kill')) {
      els.killStatus = statusLine('kill-status');
      kids.push(h('div', { class: 'lw-row' },
        h('button', { type: 'button', class: 'lw-btn lw-danger', testid: 'kill-random',
          onclick: () => killWorker('random') }, 'Kill a random busy worker'),
        h('small', { class: 'lw-doc' }, 'or click a busy worker card')), els.killStatus);
    }
    if (S.controls.has('faults')) {
      const dur = h('input', { type: 'number', id: 'lw-fault-dur', min: '1', max: '7200', value: '120',
        inputmode: 'numeric', testid: 'fault-duration', class: 'lw-num' });
      els.faultStatus = statusLine('fault-status');
      kids.push(h('div', { class: 'lw-row' }, h('label', { for: 'lw-fault-dur' }, 'Fault lasts'), dur, 's'),
        h('div', { class: 'lw-row lw-wrap' }, S.meta.faults.map((f) => h('button', {
          type: 'button', class: 'lw-btn', testid: `fault-${f}`, title: faultText(f).doc,
          onclick: () => startFault(f, Number(dur.value)) }, faultText(f).label))),
        els.faultStatus);
    }
    return section('Break it', ...kids);
  }

  async function killWorker(id) {
    const res = await W.api('POST', W.labPath(`/workers/${encodeURIComponent(id)}/kill`), {});
    const out = els.killStatus;
    if (res.ok) {
      const d = res.data;
      setText(out, `SIGKILL → ${d.worker} (pid ${d.pid}).${d.job_id ? ` Job ${d.job_id} is orphaned: only its lease can bring it back.` : ''}`);
    } else if (out) {
      setText(out, errorText(res.data, res.status));
    }
  }

  async function expireLease(jobId) {
    if (S.past) return; // the past is for looking: faults act on the live lab
    const res = await W.api('POST', W.labPath(`/jobs/${encodeURIComponent(jobId)}/lease/expire`), {});
    setText(q('lease-status'), res.ok
      ? `Lease on job ${jobId} cut short at t=${fmtT(Number(res.data.job.lease_deadline ?? W.simNow()))} s. `
        + 'Its worker does not know and keeps going; watch the message come back.'
      : errorText(res.data, res.status));
  }

  async function startFault(type, duration) {
    const body = { type };
    if (type !== 'poison') body.duration_s = duration;
    const res = await W.api('POST', W.labPath('/faults'), body);
    setText(els.faultStatus, res.ok
      ? (type === 'poison' ? `poison pill enqueued as job ${res.data.job_id}` : `${faultText(type).label} until t=${fmtT(res.data.until)} s`)
      : errorText(res.data, res.status));
  }

  // ---- scenarios: one click sets up a situation to predict (a chapter home's BUTTONS) --------
  function buildScenarios() {
    const list = S.lab.viewer ? [] : S.meta.scenario_buttons[preset] || [];
    const box = q('scenarios');
    if (!list.length) return;
    box.hidden = false;
    const hint = h('p', { class: 'lw-hint', testid: 'scenario-hint', 'aria-live': 'polite' },
      'Pick a scenario, predict what will happen, then watch.');
    // a scenario with a prediction commits the guess typed beside it first (predict.js), then runs
    box.append(h('span', { class: 'lw-scn-label' }, 'Scenarios'),
      ...list.map((s) => h('button', { type: 'button', class: 'lw-btn lw-scn', testid: `scenario-${s.id}`,
        onclick: (e) => (s.predict ? W.runPredicted(s, e.currentTarget, hint) : runScenario(s, e.currentTarget, hint)) },
      s.label)), hint);
    W.buildPredictFirst(list, box);
  }

  /** Run a scenario; returns the job ids it started (a prediction measures them), or null on failure. */
  async function runScenario(s, btn, hint) {
    btn.disabled = true;
    setText(hint, s.hint);
    const jobs = [];
    try {
      if (s.settings) {
        const res = await W.api('PATCH', W.labPath('/settings'), s.settings);
        if (!res.ok) { setText(hint, `Could not apply: ${errorText(res.data, res.status)}`); return null; }
        S.settings = res.data.settings;
        W.syncControls();
      }
      if (s.fault && !s.fault_after_calls && !await startScenarioFault(s, hint, jobs)) return null;
      for (let i = 0; s.enqueue && i < (s.count || 1); i++) {
        const res = await W.postJob(s.enqueue);
        if (!res.ok) { setText(hint, `Could not enqueue: ${errorText(res.data, res.status)}`); return null; }
        jobs.push(res.data.job_id);
      }
      if (s.fault && s.fault_after_calls) {
        // the lesson's outage: the jobs' upload parts are mid-call when storage goes down, so the fault waits
        // for every part's first call (an outage before the jobs fails each job's parts at its own start).
        // These jobs' own first calls, not the lab's call count: a run still retrying would reach that count
        // before these jobs even start, and the outage would land on that run's jobs instead
        const want = jobs.length * Number(S.settings.upload_parts || 1);
        const mine = new Set(jobs);
        const firstCalls = () => S.events.reduce((n, e) => n + (e.type === 'storage.called' && mine.has(e.job_id)
          && Number((e.data || {}).try) === 1 ? 1 : 0), 0);
        setText(hint, 'Waiting until these jobs are mid-upload (a run still going finishes first)…');
        if (!await untilTrue(() => firstCalls() >= want, 120_000)) {
          setText(hint, 'The jobs never reached storage, so the outage was not started.');
          return null;
        }
        setText(hint, s.hint);
        if (!await startScenarioFault(s, hint, jobs)) return null;
      }
      if (s.kills) jobs.push(...await rapidKills(s.kills, hint));
    } finally {
      btn.disabled = false;
    }
    return jobs;
  }

  async function startScenarioFault(s, hint, jobs) {
    const res = await W.api('POST', W.labPath('/faults'), s.fault);
    if (!res.ok) { setText(hint, `Could not start the fault: ${errorText(res.data, res.status)}`); return false; }
    if (res.data.job_id) jobs.push(res.data.job_id);
    return true;
  }

  /** Resolves true once pred() holds (checked as events arrive, every 50 ms), false after timeoutMs. */
  function untilTrue(pred, timeoutMs) {
    const end = performance.now() + timeoutMs;
    return new Promise((done) => {
      const check = () => (pred() ? done(true) : performance.now() > end ? done(false) : setTimeout(check, 50));
      check();
    });
  }

  async function rapidKills(n, hint) {
    const busy = [...S.workers.values()].filter((w) => w.state === 'busy').map((w) => w.id);
    if (!busy.length) { setText(hint, 'No worker is busy: send some jobs first (try “Steady load”).'); return []; }
    const done = [], jobs = [];
    for (const id of busy.slice(0, n)) {
      const res = await W.api('POST', W.labPath(`/workers/${id}/kill`), {});
      if (res.ok) {
        done.push(`${id}${res.data.job_id ? ` (job ${res.data.job_id})` : ''}`);
        if (res.data.job_id) jobs.push(res.data.job_id);
      }
    }
    setText(hint, `SIGKILLed ${done.join(', ') || 'nobody'}. Now watch the redelivery rate.`);
    return jobs;
  }

  // ---- dead letters: replay them, all or by reason --------------------------------------------
  function buildDlqActions() {
    if (S.lab.viewer) return;
    const sel = h('select', { id: 'lw-dlq-reason', testid: 'dlq-reason' }, h('option', { value: '' }, 'every reason'));
    const btn = h('button', { type: 'button', class: 'lw-btn', testid: 'dlq-replay',
      onclick: async () => {
        btn.disabled = true;
        const res = await W.api('POST', W.labPath('/dlq/replay'), sel.value ? { reason: sel.value } : {});
        btn.disabled = false;
        setText(els.dlqStatus, res.ok
          ? (res.data.replayed.length ? `replayed job${res.data.replayed.length > 1 ? 's' : ''} ${res.data.replayed.join(', ')} with a fresh attempt budget` : 'nothing matched that reason')
          : errorText(res.data, res.status));
        W.fetchDlq(true);
      } }, 'Replay');
    els.dlqReason = sel;
    els.dlqStatus = statusLine('dlq-status');
    q('dlq-actions').append(h('div', { class: 'lw-row lw-wrap' }, h('label', { for: 'lw-dlq-reason' }, 'Replay dead letters with'),
      sel, btn), els.dlqStatus);
  }

  return { buildControls, buildScenarios, runScenario, killWorker, expireLease, faultText };
}
