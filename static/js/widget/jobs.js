// The jobs list: the newest jobs, keyed rows with state badge, attempts and output files (play an
// MP4 in the page's player, download it); a search box that also asks the API for older matches.

import { h, setAttr, setText, stateWord, syncList, throttled, videoLabel } from './util.js';
export const PAUSE_PREF = 'lw-pause-while-inspecting'; // the learner's choice, read by job-detail.js too
const JOBS_SHOWN = 25; // rows of the jobs list in the DOM; a search asks the API for older matches

export function install(W) {
  const { S, els, q } = W;
  const jobEls = new Map();

  function buildFind() {
    const find = q('job-find');
    find.addEventListener('input', () => { W.markDirty(); findOlderSoon(); });
    if (S.controls.has('clock') && !S.lab.viewer) {
      const pref = h('input', { type: 'checkbox', testid: 'pause-while-inspecting' });
      pref.checked = localStorage.getItem(PAUSE_PREF) === '1';
      pref.addEventListener('change', () => localStorage.setItem(PAUSE_PREF, pref.checked ? '1' : '0'));
      find.closest('label').after(h('label', { class: 'lw-find' }, pref, ' pause while inspecting'));
    }
  }

  const findText = () => q('job-find').value.trim().replace(/^#/, '');
  // the live model holds the newest 200 jobs; older ones matching the id or prefix are asked of the API
  const findOlderSoon = throttled(async () => {
    const id = findText();
    if (!/^[1-9]\d*$/.test(id) || S.past) return;
    const lab = S.lab;
    if (!S.jobs.has(id) && !S.found.has(id)) {
      const res = await W.api('GET', W.labPath(`/jobs/${id}`));
      if (S.lab === lab && (res.ok || res.status === 404)) S.found.set(id, res.ok ? res.data : null);
    }
    const local = [...S.jobs.keys()].filter((k) => k.startsWith(id)).length;
    const oldest = Math.min(...[...S.jobs.keys()].map(Number));
    if (local < JOBS_SHOWN && oldest > 1 && !S.foundPrefix.has(id)) {
      const res = await W.api('GET', W.labPath(`/jobs?prefix=${id}&limit=${JOBS_SHOWN}`));
      if (res.ok && S.lab === lab) {
        S.foundPrefix.set(id, res.data.jobs.map((j) => j.id));
        for (const j of res.data.jobs) if (!S.jobs.has(j.id)) S.found.set(j.id, j);
      }
    }
    W.markDirty();
  }, 300);
  const jobById = (id) => S.jobs.get(id) || S.found.get(id);

  function renderJobs() {
    const find = findText();
    let jobs = [...S.jobs.values()];
    if (S.heldJobs && !find) jobs = S.heldJobs.map(jobById).filter(Boolean);
    else if (find) {
      jobs = jobs.filter((j) => j.id.startsWith(find));
      const have = new Set(jobs.map((j) => j.id));
      for (const id of [find, ...(S.foundPrefix.get(find) || [])]) {
        if (!have.has(id) && jobById(id)) { jobs.push(jobById(id)); have.add(id); }
      }
    }
    jobs.sort((a, b) => Number(b.id) - Number(a.id));
    q('jobs-empty').hidden = jobs.length > 0;
    if (!jobs.length && find) setText(q('jobs-empty'), /^\d+$/.test(find) && !S.found.has(find) ? `Looking for job #${find}…` : `No job #${find} in this lab.`);
    else setText(q('jobs-empty'), 'No jobs yet.');
    syncList(q('jobs'), jobEls, jobs.slice(0, JOBS_SHOWN), (j) => j.id, (j) => {
      const open = h('button', { type: 'button', class: 'lw-job-open', testid: `job-open-${j.id}`,
        'aria-expanded': 'false', onclick: () => W.openJob(j.id) }, `Job ${j.id}`);
      const video = h('span', { class: 'lw-job-video' });
      const badge = h('span', { class: 'lw-badge' });
      const att = h('span', { class: 'lw-job-att' });
      const outs = h('span', { class: 'lw-job-outputs' });
      const li = h('li', { class: 'lw-job', testid: `job-row-${j.id}` }, open, video, badge, att, outs);
      return { li, open, video, badge, att, outs, outKey: '' };
    }, (j, e) => {
      e.li.dataset.state = j.state || '';
      setText(e.video, `${videoLabel(j.payload && j.payload.video_id)}${j.payload && j.payload.job_type === 'thumbnail' ? ' · thumbnail' : ''}`);
      setText(e.badge, stateWord(j.state));
      e.badge.dataset.state = j.state || '';
      const n = Math.max((j.attempts || []).length, j.attempt || 0);
      setText(e.att, `${n} attempt${n === 1 ? '' : 's'}`);
      setAttr(e.open, 'aria-expanded', S.selectedJob === j.id ? 'true' : 'false');
      const outputs = Object.entries(j.outputs || {});
      const key = outputs.map(([k, v]) => `${k}=${v}`).join('|');
      if (key !== e.outKey) {
        e.outKey = key;
        e.outs.replaceChildren(...outputs.map(([name, url]) => (url.endsWith('.mp4')
          ? h('span', { class: 'lw-out' },
            h('button', { type: 'button', class: 'lw-btn lw-small', testid: `play-${j.id}-${name}`,
              onclick: () => play(j.id, name, url) }, `▶ ${name}`),
            h('a', { href: url, download: `job${j.id}-${name}.mp4`, testid: `output-${j.id}-${name}`,
              'aria-label': `download job ${j.id} ${name}` }, 'file'))
          : h('a', { href: url, class: 'lw-out', testid: `output-${j.id}-${name}`, target: '_blank', rel: 'noopener' }, `${name} image`))));
      }
    });
  }

  async function play(jobId, name, url) {
    const wrap = q('player-wrap');
    const v = els.player;
    let src = url;
    if (S.lab.viewer) {
      // viewers have no lab cookie: fetch with the view token and play the bytes
      const res = await fetch(url, { headers: { Authorization: `Bearer ${S.lab.token}` } });
      if (!res.ok) { setText(q('player-caption'), `could not load ${name}: HTTP ${res.status}`); wrap.hidden = false; return; }
      src = URL.createObjectURL(await res.blob());
    }
    if (v.dataset.blob) URL.revokeObjectURL(v.dataset.blob);
    v.dataset.blob = S.lab.viewer ? src : '';
    v.src = src;
    v.dataset.job = jobId;
    v.dataset.rendition = name;
    wrap.hidden = false;
    setText(q('player-caption'), `Job ${jobId}, ${name}: the real ffmpeg output this lab wrote.`);
    v.addEventListener('loadedmetadata', () => {
      setText(q('player-caption'), `Job ${jobId}, ${name}: ${v.videoWidth}×${v.videoHeight}, ${v.duration.toFixed(1)} s of real ffmpeg output.`);
    }, { once: true });
  }

  return { buildFind, jobById, renderJobs };
}
