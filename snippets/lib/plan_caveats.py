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

#: What CPU emulation cannot measure, said next to every verdict on a reader's model
#: (:data:`CAVEATS` for a step without XLA; :attr:`snippets.lib.model_plan.ModelPlan.caveats` picks).
GPU_CAVEATS = (
    "Not measurable on a CPU: cuDNN/cuBLAS workspaces (TF_CUDNN_WORKSPACE_LIMIT_IN_MB, default 4096 MiB, "
    "caps cuDNN's), NCCL buffers, the GPU layout optimizer's transposes, and XLA:GPU's buffer assignment "
    "(XLA figures here are XLA:CPU's); leave headroom for them."
)
#: What a plan of a step without XLA leaves out (a compiled step is one program: its thread count
#: moved the peak by about 1%, :data:`snippets.lib.model_plan.COMPILED_THREADS`).
THREADS_CAVEAT = (
    "Not planned: without XLA, more inter-op threads than the 8 run here (TensorFlow's default is the "
    "host's core count; tf.config.threading.set_inter_op_parallelism_threads sets it) can keep more "
    "buffers live at once."
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
