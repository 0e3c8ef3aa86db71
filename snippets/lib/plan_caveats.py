"""What the CPU emulation cannot show about a reader's model, said next to every verdict on it.

:attr:`snippets.lib.model_plan.ModelPlan.caveats` picks among these (the pages print them as
``model_plan``'s): TensorFlow's step with or without XLA, Keras on JAX's compiled step, and a step
run here under a 16-bit policy.

The sources: TensorFlow lets a convolution's cuDNN algorithm take scratch up to
``TF_CUDNN_WORKSPACE_LIMIT_IN_MB``, default ``1LL << 32`` bytes = 4096 MiB (``GetDnnWorkspaceLimit`` in
tensorflow/core/kernels/conv_ops*.cc); scratch it cannot get makes autotuning pick another algorithm, so
this is headroom, not a fixed cost. XLA:GPU assigns its own buffers (an XLA figure here is XLA:CPU's);
NCCL's buffers and the GPU layout optimizer's NHWC/NCHW transposes exist on a GPU host only.
"""

from snippets.lib.units import human_bytes


def gpu_caveats(replicas: int, jit: bool) -> str:
    """:data:`GPU_CAVEATS` as they apply to a TensorFlow step on ``replicas`` devices, compiled by XLA if ``jit``: NCCL's
    all-reduce buffers over several devices only, XLA:GPU's buffer assignment for a compiled step only (helper-62: a
    single-device plan without XLA listed both).

    >>> print(gpu_caveats(1, False))
    Not measurable on a CPU: cuDNN/cuBLAS workspaces (TF_CUDNN_WORKSPACE_LIMIT_IN_MB, default 4096 MiB, caps cuDNN's) and the GPU layout optimizer's transposes; leave headroom for them.
    >>> print(gpu_caveats(2, False).split("4096 MiB, caps cuDNN's), ")[1])
    NCCL buffers, and the GPU layout optimizer's transposes; leave headroom for them.
    """
    found = ["cuDNN/cuBLAS workspaces (TF_CUDNN_WORKSPACE_LIMIT_IN_MB, default 4096 MiB, caps cuDNN's)",
             *(["NCCL buffers"] if replicas > 1 else []), "the GPU layout optimizer's transposes",
             *(["XLA:GPU's buffer assignment (XLA figures here are XLA:CPU's)"] if jit else [])]
    listed = f"{found[0]} and {found[1]}" if len(found) == 2 else ", ".join(found[:-1]) + f", and {found[-1]}"
    return f"Not measurable on a CPU: {listed}; leave headroom for them."


#: What CPU emulation cannot measure, every buffer at once (several devices, XLA): what the pages print as what no CPU
#: shows (:data:`CAVEATS` for a step without XLA); beside a verdict, :attr:`snippets.lib.model_plan.ModelPlan.caveats`
#: names those of its step.
GPU_CAVEATS = gpu_caveats(2, True)

#: What a plan of a step without XLA cannot run here (a compiled step is one program: its thread count
#: moved the peak by about 1%, :data:`snippets.lib.model_plan.COMPILED_THREADS`). TensorFlow counts a GPU's kernels
#: inexpensive ("Kernels executing on GPU tie very few resources on the CPU where the scheduler runs": the ``OpKernel``
#: constructor, tensorflow/core/framework/op_kernel.cc), and its executor runs inexpensive kernels inline, in the
#: thread that found them ready, handing only expensive ones to the inter-op pool (``ScheduleReady`` and
#: ``KernelStats::IsExpensive``, tensorflow/core/common_runtime/executor.cc; TensorFlow 2.21). A CPU's kernels start
#: out expensive, so here they go to the pool (queued at one thread, raced at eight); no run here is the GPU's order.
THREADS_CAVEAT = (
    "Not run here: without XLA, TensorFlow launches a GPU's kernels inline, one at a time in the order its "
    "executor finds them ready (it counts GPU kernels as inexpensive), where this CPU hands its kernels to "
    "its inter-op pool; the plan is the worst of the orders drawn at 1 and 8 threads, which need not "
    "include the GPU's."
)
CAVEATS = f"{GPU_CAVEATS} {THREADS_CAVEAT}"

#: What :data:`CAVEATS` says for Keras on JAX (``--backend jax``): nothing there is TensorFlow's
#: executor, its layout optimizer or its thread pool; XLA:GPU compiles a program of its own, and
#: the scratch of the cuDNN / cuBLAS calls it emits is in that program's buffer assignment.
COMPILED_CAVEATS = (
    "Compiled by XLA:CPU, not run: XLA:GPU assigns its own buffers (fusions, scheduling, and the scratch of "
    "the cuDNN/cuBLAS calls it emits); leave headroom for it. JAX preallocates 75% of each GPU "
    "(XLA_CLIENT_MEM_FRACTION sets the fraction); the verdicts here are against that pool."
)
#: Added to :data:`COMPILED_CAVEATS` for ``keras.distribution.DataParallel`` over several devices.
ALL_REDUCE_CAVEAT = "Over several GPUs, NCCL's buffers for the gradients' all-reduce live outside XLA's buffers."

#: Added to :attr:`snippets.lib.model_plan.ModelPlan.caveats` for a step run here under a 16-bit dtype policy: TensorFlow's CPU
#: MatMul computes half precision through float32 copies of its operands, which a GPU never makes
#: (measured on the seed's layer: tests/test_scale_models.py, ``CPU_HALF_MATMUL``), so the figure errs high.
HALF_CAVEAT = ("Run here under a 16-bit policy: TensorFlow's CPU kernels compute half precision through float32 "
               "copies a GPU does not make, so this figure may be high; check it with a step on the GPU.")
#: :data:`HALF_CAVEAT`'s counterpart for a step XLA:CPU compiled under a 16-bit policy (Keras on JAX): XLA:CPU
#: (jax 0.10.2) computes a float16 or bfloat16 dot or convolution on float32 copies of its operands and
#: result, which XLA:GPU runs in 16 bits (tests/test_keep_fit.py holds the converts in the compiled HLO).
#: helper-43: a mixed_float16 CNN's compiled figure was 16% under its float32 twin's, not about half.
COMPILED_HALF_CAVEAT = ("Compiled here under a 16-bit policy: XLA:CPU computes 16-bit matmuls and convolutions on "
                        "float32 copies that XLA:GPU does not make, so this figure may be high; check it on the GPU.")

#: Steps a run at the most inter-op threads takes, at least, for its plan to leave out :func:`few_steps_caveat`: half
#: of :data:`snippets.lib.model_step.MAX_STEPS`, the most a quick run takes.
FEW_STEPS = 4


def few_steps_caveat(steps: int) -> str:
    """Said beside a plan without XLA whose runs at the most inter-op threads took as few as ``steps`` steps: each step
    draws an order of its ops anew, and an order that keeps a buffer longer can show in one step of several, which so
    few may not draw. helper-43: a mixed_float16 CNN (16-bit convolutions take 20-40 s a step at 256 on this CPU) ran 2
    steps a run, and its plan under MirroredStrategy came under a step at 64 per replica that drew such an order in
    every step; a 5-step run at 256 drew it in one step (714.7 MiB against 596)."""
    return (f"Without XLA each step's threads race, and an order of its ops that keeps a buffer longer can show in one "
            f"step of several; the runs here at the most inter-op threads took as few as {steps} steps (slow on this CPU), "
            "which may have missed it: leave headroom beyond the margin.")


#: How far apart a step's runs at one batch may peak from one inter-op thread count to the other before a plan says its
#: peak turns on an order that changes between processes. Over the benchmark's runs without XLA (benchmarks/results/
#: model_planner.json) the widest was 1.86x (a 1-D CNN at 32 per device; tests/test_model_plan.py holds it under this).
#: helper-51: a Masking + GRU(200 steps) + attention tagger ran 2.7x apart at 16 and 2.3x at 32, and the same step, run
#: alike in fresh processes (one thread, fixed hash seed, no address randomisation), peaked 64-661 MiB: five plans of
#: one command read 1.46-4.99 GiB, one "Fits" a cap that one run in six ran out of.
ORDER_SPREAD = 2.0


def order_caveat(batch: int, low: int, high: int) -> str:
    """Said beside a plan without XLA whose runs at ``batch`` per device peaked ``low`` and ``high`` bytes at two inter-op
    thread counts, :data:`ORDER_SPREAD` or more apart.

    >>> print(order_caveat(16, 85 * 2**20, 233 * 2**20))
    At 16 per device its runs peaked 2.7x apart from one inter-op thread count to the other (85 MiB and 233 MiB), wider than any the benchmark measured: this step's peak turns on the order its ops run in, which can change from one fresh process to the next, so a run may peak above this plan. Leave headroom, or plan it several times and keep the highest.
    """
    return (f"At {batch} per device its runs peaked {high / low:.1f}x apart from one inter-op thread count to the other "
            f"({human_bytes(low)} and {human_bytes(high)}), wider than any the benchmark measured: this step's peak turns "
            "on the order its ops run in, which can change from one fresh process to the next, so a run may peak above "
            "this plan. Leave headroom, or plan it several times and keep the highest.")
