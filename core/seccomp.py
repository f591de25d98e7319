"""The system-call filter every sandbox runs under: a classic BPF program for bwrap's `--seccomp FD`.

Written out here instruction by instruction (no libseccomp: nothing to install beyond the wheels the lab already
has), for x86-64, the architecture the lab runs on; `program()` is empty elsewhere and the sandbox then runs
without it (its namespaces, capabilities and limits stand alone, as before). The filter is a deny list: what a
transcode or a learner's handler never needs and what a kernel exploit or an escape most often starts from
fails with EPERM, everything else is allowed:
- new namespaces (`unshare`, `setns`, and `clone` with a namespace flag: a root caller's sandbox could otherwise
  make a user namespace of its own) and mounts (`mount`, the new mount API, `pivot_root`);
- other processes' memory and tracing (`ptrace`, `process_vm_readv/writev`, `kcmp`);
- the kernel's large attack surfaces: keyrings, `bpf`, `userfaultfd`, `perf_event_open`, io_uring,
  `open_by_handle_at`;
- modules, kexec, reboot, swap, accounting, quotas, the kernel log.
`clone3` answers ENOSYS (its flags are behind a pointer a filter cannot read), so the C library falls back to
`clone`, whose flags it can. A call made with another architecture's numbering (a 32-bit or x32 call) kills the
process: the numbers above would not mean what they say there.
"""

from __future__ import annotations

import errno
import platform
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
X32_BIT = 0x40000000
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ/JGE/JSET|K, BPF_RET|K
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in struct seccomp_data (the low half of args[0], little-endian)
ALLOW, KILL_PROCESS = 0x7FFF0000, 0x80000000
CLONE, CLONE3 = 56, 435
NAMESPACES = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
DENIED = {  # x86-64 numbers (asm/unistd_64.h)
    "syslog": 103,
    "ptrace": 101,
    "pivot_root": 155,
    "acct": 163,
    "mount": 165,
    "umount2": 166,
    "swapon": 167,
    "swapoff": 168,
    "reboot": 169,
    "init_module": 175,
    "delete_module": 176,
    "quotactl": 179,
    "kexec_load": 246,
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    "unshare": 272,
    "perf_event_open": 298,
    "name_to_handle_at": 303,
    "open_by_handle_at": 304,
    "setns": 308,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "kcmp": 312,
    "finit_module": 313,
    "kexec_file_load": 320,
    "bpf": 321,
    "userfaultfd": 323,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
}


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def _error(number: int) -> int:
    return 0x00050000 | number  # SECCOMP_RET_ERRNO


def program() -> bytes:
    """The filter as bwrap reads it (struct sock_filter[]); b'' where the lab does not run on x86-64."""
    if platform.machine() != "x86_64":
        return b""
    ops = [
        _op(_LD_ABS, _ARCH),
        _op(_JEQ, AUDIT_ARCH_X86_64, 1, 0),
        _op(_RET, KILL_PROCESS),
        _op(_LD_ABS, _NR),
        _op(_JGE, X32_BIT, 0, 1),
        _op(_RET, KILL_PROCESS),
    ]
    for number in sorted(DENIED.values()):
        ops += [_op(_JEQ, number, 0, 1), _op(_RET, _error(errno.EPERM))]
    ops += [_op(_JEQ, CLONE3, 0, 1), _op(_RET, _error(errno.ENOSYS))]
    ops += [_op(_JEQ, CLONE, 0, 3), _op(_LD_ABS, _ARG0), _op(_JSET, NAMESPACES, 0, 1), _op(_RET, _error(errno.EPERM))]
    return b"".join([*ops, _op(_RET, ALLOW)])
