"""Job functions for the raw-RQ baselines (imported by plain `rq worker` processes)."""

from __future__ import annotations


def noop() -> None:
    """The trivial job: what RQ itself costs per job (dequeue, fork a horse, record the result)."""
    return None


def import_tasks() -> None:
    """A no-op that imports the lab's job module in the horse: what every lab job paid before
    the worker parent preloaded it (RQ resolves the function in the freshly forked horse)."""
    import workers.tasks  # noqa: F401


def resolve_ffmpeg() -> None:
    """A no-op that resolves the ffmpeg binary as `core.media` does in every horse: the
    lru_cache dies with the horse, so each job imports imageio_ffmpeg and runs `ffmpeg -version`."""
    from core import media

    media.ffmpeg()
