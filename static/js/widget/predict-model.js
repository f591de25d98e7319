// Predictions, measured (issue 22): pure functions over the widget's model, so node tests them.
//
// A prediction spec comes from a chapter home, chapters/chN/ (a scenario button's `predict`, served by /api/meta):
//   {id, question, kind: 'number'|'choice', min?, max?, unit?, choices?: [[value, label]…],
//    buckets?: {value: [lo, hi]…} (a choice read off a measured number), measure, why}
// A run is what the scenario started: {jobs: [job ids], counts0: the counts when it started, events?: the
// run's events in stream order (the stepper keeps them; `gap:A:B`, `peak:type` and `pertick:type` read them)}.

const TERMINAL = new Set(['done', 'dlq', 'lost', 'failed']);

/** How many times a job ran: attempts recorded, or the attempt number if that is further on. */
export function attemptsOf(job) {
  return Math.max(job.attempts ? job.attempts.length : 0, Number(job.attempt) || 0);
}

/**
 * The measured answer once the run has settled, else null. Settled: every job of the run is in a final
 * state and no worker still runs one of them (a duplicate copy can outlive the job's first "done").
 */
export function measure(spec, S, run) {
  const [kind, arg, arg2, arg3] = String(spec.measure).split(':');
  if (run && kind === 'pertick') return perTick(run.events || [], arg); // a schedule's runs: no jobs to wait for
  if (run && kind === 'count') return countOfTick(run.events || [], arg, arg2);
  if (run && EVENTS_ONLY.has(kind)) { // these read the run's events (and its moment) only, no job's end
    const n = fromEvents(kind, arg, arg2, run, arg3);
    return n == null ? null : { number: n, value: spec.kind === 'choice' ? bucketOf(spec, n) : n };
  }
  if (!run || !run.jobs.length) return null;
  const jobs = run.jobs.map((id) => S.jobs.get(String(id)) || S.jobs.get(Number(id)));
  if (jobs.some((j) => !j || !TERMINAL.has(j.state))) return null;
  const ids = new Set(run.jobs.map(String));
  for (const w of S.workers.values()) if (w.state === 'busy' && ids.has(String(w.job_id))) return null;
  // a completion is over once its email went out or was suppressed (workers/tasks.py notify): the events of the
  // run when the stepper keeps them, else how far the lab's counters moved since the run began (on a busy host
  // the email is written a moment after the job is done, and an answer read between the two would say 0)
  const [done, told] = run.events
    ? [['job.succeeded', 'job.duplicate_completed'], ['email.sent', 'email.suppressed']]
      .map((types) => run.events.filter((e) => types.includes(e.type)).length)
    : [moved(S, run, 'succeeded') + moved(S, run, 'duplicate_completions'),
      moved(S, run, 'emails_sent') + moved(S, run, 'emails_suppressed')];
  if (told < done) return null;
  let n;
  if (kind === 'attempts') n = attemptsOf(jobs[0]);
  else if (kind === 'state') n = jobs.filter((j) => j.state === arg).length;
  else if (kind === 'peak') n = peakRetries(run.events || [], arg);
  else if (kind === 'counter') n = moved(S, run, arg);
  else return null;
  const out = { number: n, value: spec.kind === 'choice' ? bucketOf(spec, n) : n };
  if (String(spec.why || '').includes('{guard_that_acted}')) out.guard = guardThatActed(S, run);
  return out;
}

const EVENTS_ONLY = new Set(['gap', 'spread', 'moment', 'events', 'distinct', 'concurrent', 'backlog', 'meanwait', 'panel']);

/**
 * A figure read off the run's events (a guided step keeps them, and its moment, on the run):
 *   gap:A:B[:field]  simulated seconds from the run's first A to the next B after it (with `field`: the
 *                    next B that shares A's field, such as the same worker_id)
 *   spread:type:N    simulated seconds from the run's first `type` event to its N-th (a spike is narrow)
 *   moment:key       the moment's own figure (the wait a job reported when it started)
 *   events:type      how many `type` events the run had up to its moment
 *   distinct:type:f  how many different `f` (a worker_id) the run's `type` events had up to its moment
 *   concurrent:A:B   the most runs at once up to the moment: each A starts one, each B ends one
 *   backlog          jobs enqueued but not yet claimed, at the moment
 *   meanwait:N       mean queue wait (enqueued → first claim) of the run's first N jobs claimed
 *   panel:testid:attr a figure a chapter panel measured itself (run.panel reads it once its round is over)
 * Null while the figure is not in yet.
 */
export function fromEvents(kind, arg, arg2, run, arg3) {
  const evs = run.events || [];
  const upto = run.moment ? evs.slice(0, evs.indexOf(run.moment) + 1) : null;
  const at = (e) => String(e.job_id ?? (e.data || {}).job_id);
  if (kind === 'gap') {
    const a = evs.find((e) => e.type === arg);
    const field = (e) => e[arg3] ?? (e.data || {})[arg3];
    const b = a && evs.find((e) => e.type === arg2 && e.t_sim >= a.t_sim && e !== a && (!arg3 || field(e) === field(a)));
    return b ? Math.round(b.t_sim - a.t_sim) : null;
  }
  if (kind === 'spread') {
    const hits = evs.filter((e) => e.type === arg);
    return hits.length >= Number(arg2) ? Math.round(hits[Number(arg2) - 1].t_sim - hits[0].t_sim) : null;
  }
  if (kind === 'moment') {
    const v = run.moment && Number((run.moment.data || {})[arg] ?? run.moment[arg]);
    return Number.isFinite(v) ? Math.round(v) : null;
  }
  if (kind === 'events') return upto && upto.filter((e) => e.type === arg).length;
  if (kind === 'distinct') return upto && new Set(upto.filter((e) => e.type === arg).map((e) => e[arg2] ?? (e.data || {})[arg2])).size;
  if (kind === 'concurrent') {
    if (!upto) return null;
    let now = 0, most = 0;
    for (const e of upto) {
      if (e.type === arg) most = Math.max(most, ++now);
      else if (e.type === arg2) now = Math.max(0, now - 1);
    }
    return most;
  }
  if (kind === 'backlog') {
    if (!upto) return null;
    const queued = new Set(upto.filter((e) => e.type === 'job.enqueued').map(at));
    for (const e of upto) if (e.type === 'job.claimed') queued.delete(at(e));
    return queued.size;
  }
  if (kind === 'meanwait') {
    const n = Number(arg);
    const born = new Map(evs.filter((e) => e.type === 'job.enqueued').map((e) => [at(e), e.t_sim]));
    const waits = [];
    const seen = new Set();
    for (const e of evs) {
      if (e.type !== 'job.claimed' || seen.has(at(e)) || !born.has(at(e))) continue;
      seen.add(at(e));
      waits.push(e.t_sim - born.get(at(e)));
      if (waits.length === n) return Math.round(waits.reduce((x, y) => x + y, 0) / n);
    }
    return null;
  }
  if (kind === 'panel') {
    const v = run.panel ? run.panel(arg, arg2) : null;
    return v == null ? null : Math.round(v);
  }
  return null;
}

/** How far the lab's counter `name` moved since the run began. */
function moved(S, run, name) {
  return (Number(S.counts[name]) || 0) - (Number((run.counts0 || {})[name]) || 0);
}

/**
 * Which guard stopped a duplicate's side effects in this run, read off what the lab counted (not off the
 * settings: with both guards on, the claim guard blocks the copy before the notified flag is ever asked).
 */
export function guardThatActed(S, run) {
  const guard = (S.settings && S.settings.guard) || 'claim';
  if (moved(S, run, 'duplicates_blocked') > 0) {
    return `the ${guard} guard: it blocked the duplicate delivery before it ran, so the copy never reached the email`;
  }
  if (moved(S, run, 'emails_suppressed') > 0) {
    return 'the notified guard: the duplicate ran to the end and its email was suppressed';
  }
  return 'none: every copy that ran sent its own email';
}

/**
 * `type` events in one whole tick of a schedule: the first tick the run saw may have begun before its set-up,
 * so the next one is counted, once an event of the tick after it shows that it is over.
 */
export function perTick(events, type) {
  const tickOf = (e) => Number((e.data || {}).tick ?? e.tick);
  const ticks = events.map(tickOf).filter(Number.isFinite);
  if (!ticks.length) return null;
  const k = Math.min(...ticks) + 1;
  if (!ticks.some((t) => t > k)) return null;
  const n = events.filter((e) => e.type === type && tickOf(e) === k).length;
  return { number: n, value: n };
}

/**
 * How many `type` events a schedule's run had (one catch-up run, or several), after the first `after` event
 * when one is named (the replicas coming back), once the tick after the first of them has begun: by then
 * every replica has fired that tick and found it run or not.
 */
export function countOfTick(events, type, after) {
  const tickOf = (e) => Number((e.data || {}).tick ?? e.tick);
  const from = after ? events.findIndex((e) => e.type === after) : 0;
  if (from < 0) return null;
  const hits = events.slice(from).filter((e) => e.type === type);
  if (!hits.length) return null;
  const k = Math.min(...hits.map(tickOf));
  if (!events.some((e) => tickOf(e) > k)) return null;
  return { number: hits.length, value: hits.length };
}

/** The most retried `type` calls (try 2 on) that landed in one simulated second: a herd's spike. */
export function peakRetries(events, type) {
  const per = new Map();
  for (const e of events) {
    if (e.type !== type || Number((e.data || {}).try || 1) < 2) continue;
    const b = Math.floor(e.t_sim);
    per.set(b, (per.get(b) || 0) + 1);
  }
  return per.size ? Math.max(...per.values()) : 0;
}

/** The choice a measured number falls in (spec.buckets: value → [lo, hi], inclusive). */
export function bucketOf(spec, n) {
  for (const [value, [lo, hi]] of Object.entries(spec.buckets || {})) if (n >= lo && n <= hi) return value;
  return null;
}

/** A guess as the learner sees it: the choice's label, or the number with its unit. */
export function shown(spec, value) {
  if (value == null || value === '') return '–';
  if (spec.kind === 'choice') return ((spec.choices || []).find(([v]) => v === String(value)) || [null, String(value)])[1];
  const n = Number(value);
  const unit = spec.unit ? ` ${n === 1 ? spec.unit.replace(/s$/, '') : spec.unit}` : '';
  return `${n.toLocaleString('en')}${unit}`;
}

/** Is a guess valid for the spec? Returns the clean value or null. */
export function cleanGuess(spec, raw) {
  if (spec.kind === 'choice') return (spec.choices || []).some(([v]) => v === raw) ? raw : null;
  const n = Number(raw);
  if (raw === '' || raw == null || !Number.isFinite(n)) return null;
  if (spec.min != null && n < spec.min) return null;
  if (spec.max != null && n > spec.max) return null;
  return n;
}

/** The why, with the lab's own settings and the measurement filled in: "{vt_seconds}" → 300. */
export function whyText(spec, settings, m) {
  return String(spec.why || '').replace(/\{(\w+)\}/g, (_, k) => {
    if (k === 'measured') return m ? String(m.number) : '?';
    if (k === 'guard_that_acted') return m && m.guard ? m.guard : '?';
    const v = settings ? settings[k] : undefined;
    return v == null ? `{${k}}` : typeof v === 'number' ? v.toLocaleString('en') : String(v);
  });
}

/** Spread of a class's guesses: [[value, count]…] in the spec's order (choices) or numeric order. */
export function spread(spec, guesses) {
  const counts = new Map();
  for (const g of guesses) counts.set(String(g), (counts.get(String(g)) || 0) + 1);
  const keys = spec.kind === 'choice' ? (spec.choices || []).map(([v]) => v)
    : [...counts.keys()].sort((a, b) => Number(a) - Number(b));
  return keys.map((k) => [k, counts.get(k) || 0]);
}
