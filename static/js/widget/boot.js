// Opens the chapter's lab as soon as this small module arrives (an `async` module in the page's head),
// while the rest of the widget is still loading: the POST, the first snapshot and the live socket's
// handshake (its frames held until the widget attaches) then overlap the download and start of ~25 other
// modules instead of waiting for them. The page names its preset in
// <meta name="lab-preset">; index.js picks the promise up for the chapter's widget (#lab-widget).
// Pages without that meta (compare, race: several widgets, each its own lab) start nothing here.

import { openArgs, openLab } from './lab.js';

const meta = document.querySelector('meta[name="lab-preset"]');

function start() {
  const params = new URLSearchParams(location.search);
  const args = openArgs({ dataset: { preset: meta.content } }, params);
  const promise = openLab({ ...args, live: true });
  promise.catch(() => {}); // reported by the widget when it awaits it
  return { preset: args.preset, promise };
}

export const early = meta ? start() : null;
