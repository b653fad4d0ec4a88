# Type stub of the compiled ring (tinycoro/_cring.pyx), as uvloop ships loop.pyi: what type
# checkers and readers see of the extension. tinycoro.uring.CRing adds the lifecycle
# (creation, efd, close) in Python; tinycoro.core.ring.IoRing is what a ring's owner needs.
from typing import Any, Callable

class SQE:
    user_data: int

class Prep:
    code: int
    name: str
    nargs: int
    __name__: str
    def __call__(self, sqe: Any, *args: Any) -> None: ...

class timespec:
    tv_sec: int
    tv_nsec: int
    def __init__(self, seconds: float = 0) -> None: ...

class statx:
    stx_mask: int
    stx_mode: int
    stx_ino: int
    stx_nlink: int
    stx_uid: int
    stx_gid: int
    stx_size: int
    stx_blksize: int
    stx_blocks: int
    stx_dev_major: int
    stx_dev_minor: int
    stx_rdev_major: int
    stx_rdev_minor: int
    stx_atime: float
    stx_mtime: float
    stx_ctime: float
    stx_btime: float

class RingCore:
    release_gil: bool
    incremental: bool
    @property
    def ring_fd(self) -> int: ...
    def ring_open(self, entries: int, flags: int, cq_entries: int) -> None: ...
    def ring_exit(self) -> None: ...
    def register_eventfd(self, efd: int) -> None: ...
    def enable_rings(self) -> None: ...
    def unregister_eventfd(self) -> None: ...
    def queue(self, prep: Callable[..., Any], args: tuple[Any, ...], ud: int) -> None: ...
    def get_sqe(self) -> SQE: ...
    def set_return_word(self, word: bytearray | None) -> None: ...
    def submit(self) -> int: ...
    def sq_ready(self) -> int: ...
    def reap(self, out: list[tuple[int, int]]) -> int: ...
    def complete(
        self,
        slots: list[Any],
        free: list[int],
        standing: dict[int, Any],
        done: list[Any],
        shots: list[Any],
    ) -> int: ...
    def cq_ready(self) -> int: ...
    def cq_watch(self) -> int: ...
    def c_calls(self) -> int: ...
    def notify_on(self, enabled: bool) -> None: ...
    # the provided-buffer ring of multishot recvs (tinycoro.net.multishot.MultishotRecv)
    _pb_state: int
    def multishot_setup(self, count: int, size: int) -> int: ...
    def multishot_off(self) -> None: ...
    def multishot_refused(self) -> None: ...
    @property
    def multishot(self) -> bool: ...
    def multishot_free(self) -> None: ...
    @property
    def buffer_bytes(self) -> int: ...

prep_recv: Prep
prep_send: Prep
prep_read: Prep
prep_write: Prep
prep_nop: Prep
prep_cancel: Prep
prep_timeout: Prep
prep_openat: Prep
prep_close: Prep
prep_fsync: Prep
prep_accept: Prep
prep_connect: Prep
prep_shutdown: Prep
prep_statx: Prep
prep_renameat: Prep
prep_unlinkat: Prep
prep_mkdirat: Prep
prep_splice: Prep
prep_sendto: Prep
prep_poll_add: Prep
prep_recv_multishot: Prep
