"""Out-of-memory test targets (plug-ins, registered by the fault tests only).

``placer.devices.testing`` has targets that segfault, abort, hang, fail to compile or raise; these
two add running out of memory on the fault op (``PLACER_TEST_FAULT_OP``, default ``Relu``):

* ``test-oom``: lowers the worker's ``RLIMIT_AS`` to its current size + 256 MiB and allocates
  4 GiB, which fails with a real ``MemoryError`` (the limit is restored afterwards, so the worker
  goes on with the next op);
* ``test-oomkill``: the process is killed with SIGKILL, as the kernel's OOM killer does.

Imported by module name ``reliability_oom_target`` in profiling workers: the tests put this
folder on ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import resource
import signal

import numpy as np

from placer.devices.testing import _Faulty, _FaultyTarget


def _vm_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


class _Oom(_Faulty):
    def run(self, feeds):
        if self.fault == "oom":
            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            resource.setrlimit(resource.RLIMIT_AS, (_vm_bytes() + (256 << 20), hard))
            try:
                block = np.ones(1 << 30, dtype=np.float32)  # 4 GiB: beyond the limit -> MemoryError
                block[::4096] = 0.0
            finally:
                resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        elif self.fault == "oomkill":
            os.kill(os.getpid(), signal.SIGKILL)
        return self.inner.run(feeds)


class _OomTarget(_FaultyTarget):
    def compile(self, model):
        compiled = super().compile(model)
        if isinstance(compiled, _Faulty):  # the model holds the fault op
            return _Oom(compiled.inner, self.fault)
        return compiled


class OomTarget(_OomTarget):
    kind = "test-oom"
    fault = "oom"


class OomKillTarget(_OomTarget):
    kind = "test-oomkill"
    fault = "oomkill"


KINDS = {"test-oom": "reliability_oom_target:OomTarget", "test-oomkill": "reliability_oom_target:OomKillTarget"}
