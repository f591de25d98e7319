// The broker's side: the visible queue, the in-flight messages with a lease countdown ring on the
// simulated clock (and an "expire now" button where the lease is shown), the fault and breaker line,
// and the dead-letter queue.

import { fmtDur, fmtT, h, setAttr, setText, syncList, throttled } from './util.js';

export function install(W) {
  const { S, els, q } = W;
  const chipEls = new Map(), leaseEls = new Map(), dlqEls = new Map();

  function renderBroker(now) {
    const jobs = [...S.jobs.values()].sort((a, b) => Number(a.id) - Number(b.id));
    // visible queue
    const queue = jobs.filter((j) => j.state === 'queued' || j.state === 'retrying');
    syncList(q('queue'), chipEls, queue.slice(0, 40), (j) => j.id, (j) => {
      const text = h('span', {});
      return { li: h('li', { class: 'lw-chip', testid: `queued-${j.id}` }, text), text };
    }, (j, e) => {
      e.li.dataset.state = j.state;
      const retry = j.state === 'retrying';
      setText(e.text, `job ${j.id} · attempt ${j.attempt}${retry ? ` · retry at t=${j.due != null ? fmtT(j.due) : '…'} s` : ''}`);
    });
    q('queue-empty').hidden = queue.length > 0;
    // in flight: leased messages with a countdown ring on the simulated clock
    const running = jobs.filter((j) => j.state === 'running');
    const canCut = S.controls.has('kill') && !S.lab.viewer;
    if (!S.shows.has('lease')) { // a chapter before leases: what runs, and where; no countdown yet
      setText(q('inflight-empty'), 'nothing is being worked on');
      syncList(q('inflight'), leaseEls, running, (j) => j.id, (j) => {
        const text = h('span', { class: 'lw-lease-text' });
        return { li: h('li', { class: 'lw-lease', testid: `lease-${j.id}` }, text), text };
      }, (j, e) => setText(e.text, `job ${j.id} on ${j.worker || '?'}`));
      q('inflight-empty').hidden = running.length > 0;
      return;
    }
    syncList(q('inflight'), leaseEls, running, (j) => j.id, (j) => {
      const ring = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
      ring.setAttribute('viewBox', '0 0 36 36');
      ring.setAttribute('class', 'lw-ring');
      ring.setAttribute('aria-hidden', 'true');
      ring.innerHTML = '<circle class="lw-ring-bg" cx="18" cy="18" r="15.9"/><circle class="lw-ring-fg" cx="18" cy="18" r="15.9" pathLength="100" stroke-dasharray="100 100" transform="rotate(-90 18 18)"/>';
      const jid = j.id;
      const title = h('button', { type: 'button', class: 'lw-linkish lw-lease-title', testid: `lease-open-${jid}`,
        'aria-expanded': 'false', onclick: () => W.openInspect('lease', jid) });
      const left = h('span', { class: 'lw-lease-left' });
      const warn = h('span', { class: 'lw-lease-warn' });
      // the UX rule "break it by clicking the thing that fails": a lease can be cut short where it is shown
      const cut = canCut ? h('button', { type: 'button', class: 'lw-btn lw-small lw-danger lw-lease-cut',
        testid: `lease-expire-${jid}`, 'aria-label': `Expire now: the lease on job ${jid}`,
        onclick: () => W.expireLease(jid) }, 'Expire now') : null;
      const li = h('li', { class: 'lw-lease', testid: `lease-${j.id}` }, ring,
        h('span', { class: 'lw-lease-text' }, title, left, warn), cut || '');
      return { li, ring, fg: ring.lastChild, title, left, warn, cut };
    }, (j, e) => renderLease(j, e, now));
    q('inflight-empty').hidden = running.length > 0;
  }

  function renderLease(j, e, now) {
    if (e.cut) e.cut.hidden = j.lease_deadline == null || !!S.past;
    const tj = S.tl.get(j.id);
    const a = tj && tj.attempts.get(j.attempt);
    const w = S.workers.get(j.worker);
    const orphan = !w || w.job_id !== j.id || ['dead', 'respawning'].includes(w.state) || !!(a && a.deadAt != null);
    setText(e.title, `job ${j.id} · attempt ${j.attempt} on ${j.worker || '?'}`);
    setAttr(e.title, 'aria-expanded', W.isOpen('lease', j.id) ? 'true' : 'false');
    let frac = 0, state;
    if (j.lease_deadline == null) {
      state = S.settings.ack_mode === 'early' || (a && a.deadline == null) ? 'none' : 'expired';
      setText(e.left, state === 'none' ? 'no lease: acked early, deleted on claim' : 'lease expired: being redelivered');
    } else {
      const remaining = j.lease_deadline - now;
      const start = a && a.leaseStart != null ? a.leaseStart : j.lease_deadline - (S.settings.vt_seconds || 1);
      const total = Math.max(1, j.lease_deadline - start);
      frac = Math.max(0, Math.min(1, remaining / total));
      state = remaining > 0 ? (frac < 0.2 ? 'low' : 'ok') : 'expired';
      setText(e.left, remaining > 0 ? `lease: ${fmtDur(remaining)} left (deadline t=${fmtT(j.lease_deadline)} s)`
        : `lease expired ${fmtDur(-remaining)} ago: the reaper is on it`);
    }
    e.fg.setAttribute('stroke-dasharray', `${(frac * 100).toFixed(1)} 100`);
    e.li.dataset.lease = state;
    e.li.dataset.orphan = orphan ? 'yes' : 'no';
    const why = a && a.outcome === 'crashed' ? `the poison pill crashed ${j.worker}’s work horse`
      : a && a.killedAt != null ? `${j.worker} was killed at t=${fmtT(a.killedAt)} s` : `${j.worker || 'its worker'} is no longer running it`;
    setText(e.warn, orphan ? `⚠ Nobody is working on it: ${why}. The broker can’t tell; only the lease brings it back.` : '');
  }

  function renderFaults(now) {
    const box = q('faults');
    const parts = [];
    for (const [f, until] of Object.entries(S.faultUntil)) {
      if (until > now) parts.push(`⚠ ${W.faultText(f).label}: ${fmtDur(until - now)} left`);
    }
    if (S.settings.breaker || S.breaker.state !== 'closed') {
      const st = S.breaker.state || 'closed';
      parts.push(`Circuit breaker: ${st.replace('_', '-')}${st === 'open' ? ' (failing fast)' : ''}`);
    }
    const text = parts.join(' · ');
    setText(box, text);
    box.hidden = !text;
    box.dataset.alarm = /⚠|open/.test(text) ? 'yes' : 'no';
  }

  function renderDlq() {
    const n = S.counts.dlq || 0;
    setText(q('dlq-count'), n ? `${n} job${n === 1 ? '' : 's'}` : '');
    if (!S.past && n !== S.dlqFetchedFor) fetchDlqSoon();
    const items = !n ? [] : S.past ? [...S.jobs.values()].filter((j) => j.state === 'dlq').reverse()
      .map((j) => ({ job_id: j.id, attempts: j.attempt, reason: j.dlq_reason, last_error: j.last_error })) : S.dlq;
    syncList(q('dlq'), dlqEls, items.slice(0, 30), (d) => d.job_id, () => {
      const title = h('button', { type: 'button', class: 'lw-linkish', onclick: (ev) => W.openJob(ev.currentTarget.dataset.job) }), reason = h('span', { class: 'lw-dlq-reason' }), err = h('span', { class: 'lw-dlq-err' });
      return { li: h('li', { class: 'lw-dlq-item' }, title, reason, err), title, reason, err };
    }, (d, e) => {
      e.li.dataset.testid = `dlq-${d.job_id}`;
      e.title.dataset.job = d.job_id;
      setText(e.title, `job ${d.job_id} · ${d.attempts} attempt${d.attempts === 1 ? '' : 's'}`);
      setText(e.reason, d.reason);
      setText(e.err, d.last_error ? `last error: ${d.last_error}` : '');
    });
    q('dlq-empty').hidden = items.length > 0;
    if (els.dlqReason) {
      const reasons = [...new Set(S.dlq.map((d) => (d.reason || '').split(/[:(]/)[0].trim()).filter(Boolean))];
      const have = [...els.dlqReason.options].map((o) => o.value);
      for (const r of reasons) if (!have.includes(r)) els.dlqReason.append(h('option', { value: r }, r));
    }
  }

  async function fetchDlq(force) {
    const n = S.counts.dlq || 0;
    if (!force && n === S.dlqFetchedFor) return;
    S.dlqFetchedFor = n;
    const lab = S.lab;
    const res = await W.api('GET', W.labPath('/dlq'));
    if (res.ok && S.lab === lab) { S.dlq = res.data.dead_letters; W.markDirty(); }
  }

  const fetchDlqSoon = throttled(() => fetchDlq(false), 500);

  return { renderBroker, renderFaults, renderDlq, fetchDlq };
}
