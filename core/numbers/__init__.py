"""The numbers model: the ONE source of truth for every figure the course shows.

The source lesson's tables were lost, but its prose kept the facts and figures. This package turns
those facts back into arithmetic: a frozen `Inputs` (defaults = the lesson's values, `inputs`), the
queueing formulas (`queueing`), the machinery every chapter's figures share (`figures`) and the prose
helpers (`prose`). Each chapter's own figures live in its home (chapters/chN/); `chapters.derive(inputs)`
recomputes every figure and table row from the inputs. Chapter pages render its output
(``{{ fig.ch2.workers_at_target }}``) and never hard-code a number, so a learner who moves a slider sees
every dependent figure move with it.

Pure Python, stdlib only. Conventions:

* durations are seconds, rates are per second, money is US dollars, memory is decimal
  (1 MB = 1,000,000 bytes, 1 KB = 1,000 bytes — the lesson's 36 MB only works that way);
* a month is ``hours_per_month`` hours (730, the convention behind the lesson's $54,750);
* a figure that is unbounded (utilisation at or past 1) is ``None`` in the figures, so the
  result stays JSON-serialisable; the formulas themselves return ``math.inf``.

The retry delay is core/backoff.py's (one copy); this model only does the arithmetic the lesson does
about it (schedule tables, jitter peak reduction).
"""

from core.numbers.figures import core_quantities, finite, lookup
from core.numbers.inputs import (
    BYTES_PER_KB,
    BYTES_PER_MB,
    DEFAULT_JOB_MIX,
    INPUT_SPECS,
    SECONDS_PER_DAY,
    SPECS_BY_NAME,
    InputError,
    Inputs,
    InputSpec,
    JobType,
    inputs_from_mapping,
    spec_values,
)
from core.numbers.prose import ceil_workers, fmt
from core.numbers.queueing import (
    approx_wait,
    blended_duration,
    erlang_b,
    erlang_c,
    erlang_c_wait,
    even_jobs_wait,
    jitter_expected_peak,
    jitter_peak_per_bucket,
    jitter_peak_reduction,
    littles_law_L,
    workers_for_utilisation,
)

__all__ = [
    "BYTES_PER_KB",
    "BYTES_PER_MB",
    "DEFAULT_JOB_MIX",
    "INPUT_SPECS",
    "SECONDS_PER_DAY",
    "SPECS_BY_NAME",
    "InputError",
    "InputSpec",
    "Inputs",
    "JobType",
    "approx_wait",
    "blended_duration",
    "ceil_workers",
    "core_quantities",
    "erlang_b",
    "erlang_c",
    "erlang_c_wait",
    "even_jobs_wait",
    "finite",
    "fmt",
    "inputs_from_mapping",
    "jitter_expected_peak",
    "jitter_peak_per_bucket",
    "jitter_peak_reduction",
    "littles_law_L",
    "lookup",
    "spec_values",
    "workers_for_utilisation",
]
