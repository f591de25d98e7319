// Send work: upload a video (file picker or drop), or enqueue one of the server's sample clips
// (/api/meta samples); chapter 0 also times the same clip through an inline handler and the queue.

import { errorText, fmtDur, fmtNum, h, section, setText, statusLine } from './util.js';

export function install(W) {
  const { S, els } = W;

  function buildUpload() {
    const file = h('input', { type: 'file', id: 'lw-file', class: 'lw-file', testid: 'upload-file',
      accept: 'video/mp4,video/webm,video/x-msvideo,video/*', 'aria-describedby': 'lw-file-doc' });
    const drop = h('div', { class: 'lw-drop', testid: 'drop-zone' },
      h('label', { for: 'lw-file' }, h('strong', {}, 'Upload a video'), ': drop it here or ',
        h('span', { class: 'lw-linkish' }, 'choose a file')),
      file,
      h('small', { id: 'lw-file-doc', class: 'lw-doc' }, 'MP4, WebM or AVI. The server checks the bytes, not the name.'));
    file.addEventListener('change', () => { if (file.files[0]) upload(file.files[0]).finally(() => { file.value = ''; }); });
    for (const type of ['dragenter', 'dragover']) {
      drop.addEventListener(type, (e) => { e.preventDefault(); drop.classList.add('lw-drag'); });
    }
    for (const type of ['dragleave', 'drop']) drop.addEventListener(type, () => drop.classList.remove('lw-drag'));
    drop.addEventListener('drop', (e) => {
      e.preventDefault();
      const f = e.dataTransfer && e.dataTransfer.files[0];
      if (f) upload(f);
    });
    const sample = h('select', { id: 'lw-sample', testid: 'sample-select' },
      S.meta.samples.map((s) => h('option', { value: s.name }, s.label)));
    const send = h('button', { type: 'button', class: 'lw-btn lw-primary', testid: 'sample-submit',
      onclick: () => enqueueSample(sample.value) }, 'Enqueue it');
    els.uploadStatus = statusLine('upload-status');
    els.uploadError = h('p', { class: 'field-error', testid: 'upload-error', role: 'alert' });
    const kids = [drop,
      h('label', { for: 'lw-sample', class: 'lw-block-label' }, 'or use a sample clip'),
      h('div', { class: 'lw-row lw-sample-row' }, sample, send),
      els.uploadStatus, els.uploadError];
    // An `inline` control (chapter 0): the same clip through an inline handler (the request waits for ffmpeg) and
    // through the queue (202 at once), both timed for real.
    if (S.controls.has('inline')) kids.push(buildInline(sample));
    return section('Send work', ...kids);
  }

  function buildInline(sample) {
    const rows = {};
    const row = (id, label) => {
      const bar = h('span', { class: 'lw-cmp-fill' });
      const val = h('span', { class: 'lw-cmp-val', testid: `compare-${id}` }, '–');
      rows[id] = { bar, val, ms: null };
      return h('div', { class: 'lw-cmp-row' }, h('span', { class: 'lw-cmp-label' }, label),
        h('span', { class: 'lw-cmp-bar' }, bar), val);
    };
    const note = statusLine('compare-status');
    const show = () => {
      const max = Math.max(1, ...Object.values(rows).map((r) => r.ms || 0));
      for (const r of Object.values(rows)) r.bar.style.width = r.ms == null ? '0' : `${Math.max(1, (r.ms / max) * 100)}%`;
    };
    const inlineBtn = h('button', { type: 'button', class: 'lw-btn', testid: 'inline-submit' }, 'Inline handler');
    const queueBtn = h('button', { type: 'button', class: 'lw-btn', testid: 'enqueue-submit' }, 'Enqueue handler');
    // after a 504 the server transcodes on for nobody, holding the one inline slot: the button waits for it
    let serverBusy = false;
    W.root.addEventListener('lab:event', (e) => {
      if (e.detail.type !== 'inline.finished' || !serverBusy) return;
      serverBusy = false;
      inlineBtn.disabled = false;
      setText(note, `${note.textContent} The server has now finished that transcode.`);
    });
    inlineBtn.addEventListener('click', async () => {
      inlineBtn.disabled = true;
      setText(rows.inline.val, 'waiting… the request is held while ffmpeg runs (on the lab clock)');
      const t0 = performance.now();
      const res = await W.api('POST', W.labPath('/inline'), { sample: sample.value });
      const ms = Math.round(performance.now() - t0);
      serverBusy = res.status === 504;
      inlineBtn.disabled = serverBusy;
      // The inline request is paced on the lab's clock: its time is simulated seconds, like every
      // duration in the widget; a request silent past the gateway timeout ends in a real 504.
      const d = res.data || {};
      if (res.ok || res.status === 504) {
        rows.inline.ms = (d.simulated_s || 0) * 1000;
        // the clock waited for ffmpeg (a transcode slower than duration ÷ speed): say so, with the speed it ran at
        const slowed = d.clock_slowed ? `; the clock slowed to ${fmtNum(d.running_speed)}× of ${fmtNum(d.speed)}× while ffmpeg caught up` : '';
        setText(rows.inline.val, res.ok
          ? `200 OK after ${fmtNum(d.simulated_s)} s simulated (${ms.toLocaleString('en')} ms real${slowed})`
          : `504 Gateway Timeout after ${fmtNum(d.simulated_s)} s simulated`);
        setText(note, res.ok
          ? `Inline: the request was held ${fmtNum(d.simulated_s)} s (simulated) for a 200. Every one of those seconds held a web thread.`
          : `Inline: the gateway gave up after ${fmtNum(d.gateway_timeout_s)} s of silence and answered 504. The server is still transcoding — ${fmtNum(d.duration_s - d.gateway_timeout_s)} s more, for nobody.`);
      } else {
        setText(rows.inline.val, '–');
        setText(note, `${res.status}: ${errorText(res.data, res.status)}`);
      }
      show();
    });
    queueBtn.addEventListener('click', async () => {
      queueBtn.disabled = true;
      const t0 = performance.now();
      const res = await W.postJob({ sample: sample.value });
      const ms = Math.round(performance.now() - t0);
      queueBtn.disabled = false;
      if (res.status === 202) {
        rows.queue.ms = ms;
        setText(rows.queue.val, `${ms.toLocaleString('en')} ms until the 202 (job ${res.data.job_id})`);
        setText(note, `Enqueue: 202 Accepted after ${ms} ms${res.data.enqueue_ms != null ? ` (${fmtNum(res.data.enqueue_ms)} ms of it on the server)` : ''}; job ${res.data.job_id} carries on in a worker.`);
      } else {
        setText(note, `${res.status}: ${errorText(res.data, res.status)}`);
      }
      show();
    });
    return h('div', { class: 'lw-compare', role: 'group', 'aria-labelledby': 'lw-cmp-h', testid: 'inline-compare' },
      h('h4', { id: 'lw-cmp-h' }, 'Inline vs enqueue, timed on the lab clock'),
      h('p', { class: 'lw-doc' }, 'Predict both response times first. Uses the sample clip chosen above.'),
      h('div', { class: 'lw-row lw-wrap' }, inlineBtn, queueBtn),
      row('inline', 'inline'), row('queue', 'enqueue'), note);
  }

  async function upload(f) {
    const fd = new FormData();
    fd.append('file', f, f.name);
    await sendJob(fd, `“${f.name}” (${(f.size / 1e6).toFixed(1)} MB)`);
  }

  function enqueueSample(name) {
    return sendJob({ sample: name }, `sample “${name}”`);
  }

  async function sendJob(body, what) {
    setText(els.uploadError, '');
    setText(els.uploadStatus, `sending ${what}…`);
    const t0 = performance.now();
    const res = await W.postJob(body);
    const ms = Math.round(performance.now() - t0);
    if (res.status === 202) {
      const dur = res.data.payload && res.data.payload.duration_s;
      const speed = S.clock ? S.clock.speed : 1;
      setText(els.uploadStatus, `202 Accepted in ${ms} ms → job ${res.data.job_id}. The work itself takes`
        + ` ${fmtDur(dur)} simulated (${fmtNum(dur / speed)} s real at ${fmtNum(speed)}×).`);
    } else {
      setText(els.uploadStatus, '');
      setText(els.uploadError, `${res.status || 'network'}: ${errorText(res.data, res.status)}`);
    }
  }

  return { buildUpload, enqueueSample };
}
