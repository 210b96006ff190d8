"""TVM (Relax, llvm) tuned with MetaSchedule: the ``tvm-llvm-tuned`` target (opt-in).

Untuned Relax CPU kernels are naive loops (docs/tvm_notes.md Q3); MetaSchedule with ~64
trials brings a 512^3 MatMul to ONNX Runtime's speed. This target compiles like ``tvm-llvm``
(import, legalize, fold, fuse) and then, for every fused kernel (a MetaSchedule "task"):

1. looks the kernel up in a persistent JSON tuning database (``JSONDatabase`` under the work
   dir; kernels are matched structurally, so a signature -- or any kernel equal to one already
   tuned -- is tuned once and reused by every later compile, process and campaign);
2. tunes the kernels not seen yet with ``trials`` trials each (``tune_tasks``, XGBoost cost
   model, a ``LocalBuilder`` with a 120 s timeout instead of 30 s: builds time out on a loaded
   box otherwise) and marks them as attempted (so a kernel whose candidates all failed is not
   re-tuned on every compile);
3. applies the database (``relax.transform.MetaScheduleApplyDatabase`` inside the database's
   scope) and lowers with the CPU backend's dataflow-lowering and finalization passes.

Options (environment, as target names carry only kind/cores/threads):

* ``PLACER_TVM_TRIALS`` -- trials per kernel (default 32); part of the fingerprint;
* ``PLACER_TVM_TUNING_DIR`` -- the database directory (default ``~/.cache/placer/tvm-tuning``);
  one sub-directory per (mcpu, threads), so targets of different resources never share records;
* ``PLACER_TVM_MCPU`` -- the LLVM CPU name (default: the host's, ``llvm_get_system_cpu``);
* ``PLACER_TVM_PREPACK`` (default 1) -- let tuning choose the weights' layout
  (``AttachAttrLayoutFreeBuffers``; the layout rewrite of the constant weights is then split out
  and folded at compile time): 256^3 MatMul 1.4-1.7x of ONNX Runtime vs 2.2x without, here;
* ``PLACER_TVM_TUNE_ALL`` (default 0) -- also tune elementwise/broadcast/injective kernels
  (memory-bound; otherwise left with the default schedule: tuning one costs ~1 minute here).

Tuning a kernel takes about trials x 1-3 s on the reference box, so a profiling campaign
allows this target :attr:`TvmLlvmTunedTarget.profile_timeout_s` per measurement.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
from typing import Any

from placer.devices.base import CompiledModel
from placer.devices.tvm_target import TvmCompiled, TvmLlvmTarget
from placer.errors import TargetError, first_line

DEFAULT_TRIALS = 32
BUILDER_TIMEOUT_S = 120.0


@functools.lru_cache(maxsize=1)
def host_mcpu() -> str:
    """The host CPU as LLVM names it (e.g. ``znver4``), without calling ``llc``."""
    env = os.environ.get("PLACER_TVM_MCPU")
    if env:
        return env
    try:
        from tvm.target import codegen

        name = str(codegen.llvm_get_system_cpu())
        return "" if name in ("", "generic") else name
    except Exception:
        return ""


def tuning_dir() -> Path:
    return Path(os.environ.get("PLACER_TVM_TUNING_DIR") or Path.home() / ".cache" / "placer" / "tvm-tuning")


def trials_option() -> int:
    try:
        return max(int(os.environ.get("PLACER_TVM_TRIALS", DEFAULT_TRIALS)), 0)
    except ValueError:
        raise TargetError(f"PLACER_TVM_TRIALS={os.environ['PLACER_TVM_TRIALS']!r} is not an integer") from None


class TvmLlvmTunedTarget(TvmLlvmTarget):
    kind = "tvm-llvm-tuned"
    runtime = "tvm"
    profile_timeout_s = 1800.0  # tuning happens inside compile

    @property
    def trials(self) -> int:
        opt = self.spec.option("trials")
        return int(opt) if opt is not None else trials_option()

    @property
    def tune_all(self) -> bool:
        opt = self.spec.option("tune_all")
        if opt is not None:
            return bool(opt)
        return os.environ.get("PLACER_TVM_TUNE_ALL", "0") not in ("0", "false", "no", "")

    @property
    def prepack(self) -> bool:
        opt = self.spec.option("prepack")
        if opt is not None:
            return bool(opt)
        return os.environ.get("PLACER_TVM_PREPACK", "1") not in ("0", "false", "no")

    @property
    def mcpu(self) -> str:
        return self.spec.option("mcpu") or host_mcpu()

    def runtime_version(self) -> str:
        import tvm

        return f"tvm {tvm.__version__} llvm metaschedule"

    def fingerprint(self) -> dict[str, Any]:
        fp = super().fingerprint()
        fp.update(mcpu=self.mcpu, trials=self.trials, prepack=self.prepack, tune_all=self.tune_all)
        return fp

    def tvm_target(self):
        import tvm

        cfg: dict[str, Any] = {"kind": "llvm", "num-cores": int(self.spec.threads)}
        if self.mcpu:
            cfg["mcpu"] = self.mcpu
        return tvm.target.Target(cfg)

    def work_dir(self) -> Path:
        d = tuning_dir() / f"{self.mcpu or 'generic'}-t{self.spec.threads}{'-prepack' if self.prepack else ''}"
        d.mkdir(parents=True, exist_ok=True)
        return d

    # ---- compile ----------------------------------------------------------------------------
    def _legalize_and_fuse(self, mod, tgt):
        import tvm
        from tvm import relax
        from tvm.relax.backend.cpu_generic import pipeline as cpu

        with tgt:
            passes = [relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings(),
                      *cpu.library_dispatch_passes(tgt), *cpu.legalize_passes(tgt)]
            if self.prepack:  # let tuning pick the weights' layout (the rewrite is folded afterwards)
                passes.append(relax.transform.AttachAttrLayoutFreeBuffers())
            return tvm.transform.Sequential(passes)(mod)

    def tune(self, mod, name: str = "<model>") -> dict:
        """Tune the kernels of a legalized+fused Relax module that the database lacks; returns stats."""
        from tvm.s_tir import meta_schedule as ms

        tgt = self.tvm_target()
        wd = self.work_dir()
        done_dir = wd / "attempted"
        done_dir.mkdir(exist_ok=True)
        tasks = ms.relax_integration.extract_tasks(mod, tgt)
        db = ms.database.JSONDatabase(work_dir=str(wd))
        todo = []
        for task in tasks:
            if not self.tune_all and _op_pattern(task) < 3:
                continue  # elementwise / broadcast / injective: memory-bound, kept untuned (a minute each otherwise)
            mark = done_dir / _task_digest(task, self.trials)
            if mark.exists() or db.query_tuning_record(task.dispatched[0], tgt, task.task_name) is not None:
                continue
            todo.append((task, mark))
        stats = {"tasks": len(tasks), "tuned": len(todo), "trials": self.trials}
        if not todo or self.trials <= 0:
            return stats
        log_dir = wd / "logs"
        ctxs, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
            [t for t, _ in todo], work_dir=str(log_dir), num_threads=max(os.cpu_count() or 1, 1), seed=0
        )
        if ctxs:
            ms.tune.tune_tasks(
                tasks=ctxs,
                task_weights=weights,
                work_dir=str(log_dir),
                max_trials_global=self.trials * len(ctxs),
                max_trials_per_task=self.trials,
                num_trials_per_iter=min(self.trials, 64),
                builder=ms.builder.LocalBuilder(timeout_sec=BUILDER_TIMEOUT_S),
                runner="local",
                database=db,
                cost_model="xgb",
            )
        for _, mark in todo:
            mark.touch()
        return stats

    def build(self, mod, name: str = "<model>"):
        """Legalize, fuse, tune what the database lacks, apply the database, lower. TargetError on failure."""
        import tvm
        from tvm import relax
        from tvm.relax.backend.cpu_generic import pipeline as cpu
        from tvm.s_tir import meta_schedule as ms

        tgt = self.tvm_target()
        try:
            mod = self._legalize_and_fuse(mod, tgt)
            self.last_tuning = self.tune(mod, name)
            db = ms.database.JSONDatabase(work_dir=str(self.work_dir()))
            with tgt, db, tvm.transform.PassContext(opt_level=3):
                mod = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(mod)
                if self.prepack:  # weights are constants: fold their layout rewrite at compile time
                    mod = tvm.transform.Sequential([relax.transform.SplitLayoutRewritePreproc(),
                                                    relax.transform.FoldConstant()])(mod)
                mod = tvm.transform.Sequential([*cpu.dataflow_lower_passes(tgt), *cpu.finalize_passes(tgt)])(mod)
            return tvm.compile(mod, target=tgt, relax_pipeline=None)
        except TargetError:
            raise
        except Exception as exc:
            raise TargetError(f"{self.name}: tuning/compiling {name} failed: {first_line(exc)}") from exc

    def compile(self, model: Any) -> CompiledModel:
        import tvm

        _config_threads(self.spec.threads)
        ex, inputs, outputs = self.import_and_build(model)
        return TvmCompiled(ex, inputs, outputs, tvm.cpu(0))


def _op_pattern(task) -> int:
    """The kernel's TVM OpPatternKind (0 elementwise, 1 broadcast, 2 injective, 3 reduction,
    4 out-elementwise-fusable: conv/matmul, 7 tuple, 8 opaque); 8 when unknown."""
    try:
        for _gv, f in task.dispatched[0].functions.items():
            pat = f.attrs.get("op_pattern") if f.attrs is not None else None
            if pat is not None:
                return int(pat)
    except Exception:
        pass
    return 8


def _task_digest(task, trials: int) -> str:
    import tvm_ffi

    h = int(tvm_ffi.structural_hash(task.dispatched[0])) & ((1 << 64) - 1)
    tag = f"{task.task_name}-{h:016x}-{task.target!s}-{trials}"
    return hashlib.sha256(tag.encode()).hexdigest()[:24]


def _config_threads(threads: int) -> None:
    """Size TVM's thread pool to the target's threads (tuned kernels have parallel loops)."""
    try:
        import tvm_ffi

        if int(tvm_ffi.get_global_func("runtime.NumThreads")()) != int(threads):
            tvm_ffi.get_global_func("runtime.config_threadpool")(0, int(threads))
    except Exception:
        pass
