"""The ground floor both processes stand on: settings, presets, events, keys, clock, stream, the lab
registry and the numbers model. Imports neither `app` (web) nor `workers` (pool), and no Flask."""
