"""Process lifetime: a child that must not outlive its parent."""

import ctypes
import signal


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux PR_SET_PDEATHSIG).

    Set in each rq worker (parent: the supervisor) and again in each work horse (parent: its
    worker), because the setting is cleared on fork: a dead supervisor then leaves no orphans.
    """
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:
        pass
