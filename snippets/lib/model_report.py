"""The command line's answer for a reader's model: what the planned step trains with, its figures, the
verdict, the largest batch per card, the remedies and what the emulation could not show.

``python -m snippets.decide --model`` prints :func:`model_report` (or :func:`model_json`) for a plan of
:mod:`snippets.lib.model_plan`. The step that was measured trains with the loss and dtype policy the
reader's function chose where it chose one (it runs inside the measuring process after the planner's own
settings), so :func:`model_setup` names each and where it came from, and says when an option given on
the command line was not used.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace

from snippets.lib import compiled_curve, hardware, model_accumulation, model_plan, units
from snippets.lib.batch_limits import (BATCH_CARDS, JAX_LINE, card_pool, largest_batches, limit_note, line_checked,  # noqa: F401
                                       listed, unchecked)
from snippets.lib.model_remedies import BatchRemedy, half_best_case, strategy_note
from snippets.lib.plan_runs import grew_words
from snippets.lib.private import CUDNN, NO_JIT

#: :attr:`ModelSetup.xla_from` when neither ``--xla`` nor the model's compile chose: ``jit_compile="auto"``.
XLA_DEFAULT = "Keras's default"


@dataclass(frozen=True)
class ModelSetup:
    """What the planned step trains with, and where each came from.

    Attributes:
        loss: the loss ``fit`` trains with, in words (:func:`snippets.lib.model_batch.loss_name`);
            None if neither the model's source nor ``--loss`` gave one.
        loss_from: ``"the function's compile"`` (``"the file's compile_config"`` for ``--model-json``),
            ``"--loss"``, or :data:`OWN_STEP` (no loss compiled or given, and the model's own
            ``train_step``: it computes its loss itself); "" with no loss.
        policy: the Keras dtype policy the model is built under (``"float32"``: Keras's default).
        policy_from: ``"the function"`` (``"the file"``), ``"--policy"``, ``"--dtype"`` or ``"Keras's default"``.
        notes: one sentence for each option given and not used, or overruled by the model.
        no_xla: the layers that keep Keras from compiling the step with XLA on a GPU host, where it
            was asked for, each with its reason (:func:`snippets.lib.private.gpu_xla_blockers`): the
            step is planned without XLA.
        xla: the ``--xla`` mode planned (:func:`source_xla`): ``"auto"``, ``"on"`` or ``"off"``.
        xla_from: ``"--xla"`` when the option chose (``"on"`` or ``"off"``), the model's own compile when
            it chose ``jit_compile``, else ``"Keras's default"`` (``"auto"``: Keras decides, as on a GPU host).
        adds_loss: the model's layers add a loss (``add_loss``), which ``fit`` adds to :attr:`loss` (alone:
            :attr:`loss_from` is :data:`ADDED_LOSS`).
        tf_step: the model's own ``train_step`` takes its batch alone, which Keras on JAX does not call
            (:func:`snippets.lib.model_source.tf_form_step`): no sentence offers ``--backend jax`` (:func:`jax_line`).
    """

    loss: str | None
    loss_from: str
    policy: str
    policy_from: str
    notes: tuple[str, ...] = ()
    no_xla: Mapping[str, str] = field(default_factory=dict)
    xla: str = "auto"
    xla_from: str = XLA_DEFAULT
    adds_loss: bool = False
    tf_step: bool = False

    @property
    def source_chose_xla(self) -> bool:
        """Whether the model's own compile chose the XLA mode planned (its ``jit_compile``), not an option."""
        return self.xla_from not in ("--xla", XLA_DEFAULT)

    @property
    def planned_policy(self) -> str | None:
        """The policy to hand to the measured step (None: Keras's default)."""
        return None if self.policy_from == "Keras's default" else self.policy


#: How :func:`model_setup` names a model's own choices, by where the model came from: the source
#: (its policy's origin), what compiles it, and its compile (the loss's origin).
SOURCES = {"function": ("the function", "the function compiles", "the function's compile"),
           "file": ("the file", "the file's compile_config compiles", "the file's compile_config")}


def source_xla(xla: str, jit_compile: bool | None) -> str:
    """The ``--xla`` mode to plan: the option when given as ``"on"`` or ``"off"``, else the
    ``jit_compile`` the model's source compiled with (True: ``"on"``), else ``"auto"``.

    A compiled model keeps its ``jit_compile`` on a GPU host (``Model.compile`` resolves only
    ``"auto"``), so that is the step the reader's ``fit`` runs unless they compile it again.

    >>> source_xla("auto", False), source_xla("auto", None), source_xla("on", False)
    ('off', 'auto', 'on')
    """
    if xla != "auto" or jit_compile is None:
        return xla
    return "on" if jit_compile else "off"


#: :attr:`ModelSetup.loss_from` for a model whose own ``train_step`` or ``compute_loss`` computes its loss.
OWN_STEP = "its own train_step or compute_loss"
#: :attr:`ModelSetup.loss_from` for a model whose layers add the loss ``fit`` trains on (``add_loss``).
ADDED_LOSS = "its layers' add_loss"


def model_setup(function_loss: str | None, function_policy: str | None, loss: str | None = None,
                policy: str | None = None, dtype: str | None = None, function_optimizer: str | None = None,
                optimizer: str | None = None, own_step: bool = False, no_xla: Mapping[str, str] | None = None,
                source: str = "function", xla: str = "auto", function_jit: bool | None = None,
                unmeasured: Sequence[str] = (), dropped: Sequence[str] = (),
                own_policies: Mapping[str, int] | None = None, adds_loss: bool = False,
                step_optimizers: Sequence[str] = (), own_compile: str | None = None,
                own_optimizer: bool = False, tf_step: bool = False) -> ModelSetup:
    """Which loss, dtype policy and XLA mode the step trains with: the model source's own first, then
    the options.

    The function runs after the planner has set ``policy`` (:func:`snippets.lib.model_step.build`), so
    a policy it sets itself is the one its model is built under; a model it compiled trains with that
    compile's loss (the issue's rule: "the loss is the one the builder compiled with, else --loss").

    Args:
        function_loss: the loss the reader's function compiled its model with, in words, or None.
        function_policy: the mixed-precision policy the function set, or None.
        loss, policy, dtype: ``--loss``, ``--policy``, ``--dtype`` as given (None: not given).
        function_optimizer: the optimizer the function compiled with, in words, or None.
        optimizer: ``--optimizer``: the one measured, whatever the function compiled (the planner
            compiles the model again with it, and with the loss, only: other compile options, such
            as metrics, are not measured).
        own_step: the model's class overrides ``train_step`` or ``compute_loss``
            (:func:`snippets.lib.model_step.own_train_step`).
        no_xla: the layers for which Keras would not XLA-compile the step on a GPU host, with
            their reasons (:func:`snippets.lib.private.gpu_xla_blockers`), given only when XLA was
            asked for (``--xla on``, or ``auto`` where Keras would compile): the step is planned without it.
        source: where the reader's model came from, a key of :data:`SOURCES`: ``"function"``
            (``--model``) or ``"file"`` (``--model-json``, whose ``compile_config`` is its compile).
        xla: ``--xla`` as given; function_jit: the ``jit_compile`` the source compiled with
            (:attr:`snippets.lib.model_source.SourceFacts.jit_compile`): see :func:`source_xla`.
        unmeasured: options of the source's compile the planner leaves out
            (:attr:`snippets.lib.model_source.SourceFacts.unmeasured`), named in a note.
        dropped: options of the source's optimizer that change memory (``gradient_accumulation_steps=4``,
            ``use_ema=True``), named in a note when ``--optimizer`` replaces it, whatever its name.
        own_policies: ``{policy: layers}`` built under a dtype policy of their own
            (:func:`snippets.lib.model_source.own_policies`), named in a note.
        adds_loss: a layer calls ``add_loss`` while the model is built
            (:attr:`snippets.lib.model_source.SourceFacts.adds_loss`): with no loss compiled or given and no
            ``train_step`` of its own, fit trains on that loss alone (:data:`ADDED_LOSS`).
        step_optimizers: the model's attributes that hold an optimizer other than the compiled one, where its class
            overrides ``train_step`` (:attr:`snippets.lib.model_source.SourceFacts.step_optimizers`): that step may
            train with them, whatever ``--optimizer`` compiles, so a note says so.
        own_compile: the signature of the class's own ``compile`` where it cannot take one optimizer and a loss
            (:attr:`snippets.lib.model_source.SourceFacts.own_compile`): the runs keep what the function's call of it
            set and compile the model again with ``keras.Model.compile``, as a note says.
        own_optimizer: the function's own optimizer object is planned (no ``--optimizer``): nothing replaced it.
        tf_step: :attr:`snippets.lib.model_source.SourceFacts.tf_step`, kept as :attr:`ModelSetup.tf_step`.

    >>> setup = model_setup("mse", "mixed_float16", loss="huber", policy="mixed_bfloat16")
    >>> setup.loss, setup.loss_from, setup.policy, setup.policy_from
    ('mse', "the function's compile", 'mixed_float16', 'the function')
    >>> print("\\n".join(setup.notes))
    --loss huber is not used: the function compiles the model with mse, which fit trains with.
    --policy mixed_bfloat16 is not used: the function sets mixed_float16 itself, which overrides it.
    >>> model_setup(None, None, loss="mse", function_optimizer="sgd", optimizer="adam").notes
    ('--optimizer adam is planned: the function compiles with sgd; it compiles no loss, and the step trains with --loss mse.',)
    >>> model_setup("mse", None, function_optimizer="adamw", optimizer="adamw").notes
    ("--optimizer adamw is planned: a new adamw with Keras's defaults, in place of the function's (the same slots; omit --optimizer to plan the function's own object).",)
    >>> model_setup("huber", None, function_optimizer="sgd", optimizer="adam").notes
    ('--optimizer adam is planned: the function compiles with sgd; of its compile, only the loss is kept.',)
    >>> model_setup("mse", None, function_optimizer="adam", optimizer="adam",
    ...             dropped=["gradient_accumulation_steps=4"]).notes[0]
    "--optimizer adam is planned: a new adam, without the function's gradient_accumulation_steps=4 (omit --optimizer to plan the function's own optimizer with it)."
    >>> print(model_setup("mse", None, policy="mixed_float16", own_policies={"mixed_bfloat16": 3}).notes[0])
    3 layers with weights hold a dtype policy of their own (mixed_bfloat16 on 3; given with dtype=, or the global policy when built): in the model, a global policy (--policy, --dtype) does not reach them.
    >>> setup = model_setup(None, None, loss="mse", dtype="float16")
    >>> setup.loss_from, setup.policy, setup.policy_from, setup.notes
    ('--loss', 'float16', '--dtype', ())
    >>> print(model_setup(None, None, optimizer="adam", own_step=True, step_optimizers=("d_optimizer", "g_optimizer")).notes[0])
    Its train_step may train with optimizers of its own (d_optimizer, g_optimizer): the runs measure the step as it is, with them; --optimizer adam is only the optimizer the model is compiled with, which that step need not use.
    >>> print(model_setup("mse", None, optimizer="adam", policy="mixed_float16").notes[0])
    Under mixed_float16, Keras's compile wraps the optimizer in a LossScaleOptimizer unless it is one (auto_scale_loss=True): the step scales the loss and unscales the gradients, and the plan is of that step.
    >>> print(model_setup(None, None, optimizer="adam", policy="mixed_float16", own_step=True).notes[0])
    Under mixed_float16, Keras's compile wraps the optimizer in a LossScaleOptimizer unless it is one (auto_scale_loss=True): a train_step of the model's own scales the loss only where it calls self.optimizer.scale_loss, and the plan is of that step as it is.
    >>> for xla in ("auto", "on"):  # helper-98: an LSTM's file was told "pass --xla on", or that --xla on was planned
    ...     print(model_setup("mse", None, no_xla={"LSTM": "cudnn"}, source="file", function_jit=False, xla=xla).notes)
    ("Keras compiles no XLA step for this model on a GPU host (LSTM; an LSTM or GRU runs cuDNN's kernel there), so it is planned without XLA.",)
    ("--xla on is not used: Keras compiles no XLA step for this model on a GPU host (LSTM; an LSTM or GRU runs cuDNN's kernel there), so it is planned without XLA.",)
    >>> setup_lines(model_setup(None, None, adds_loss=True))[0]
    "Trains with the loss its layers' add_loss computes, dtype policy float32 (Keras's default)."
    >>> setup_lines(model_setup("mse", None, adds_loss=True))[0]  # keras-io's VAE: a KL term beside a compiled loss
    "Trains with loss mse (the function's compile) plus the loss its layers' add_loss computes, dtype policy float32 (Keras's default)."
    """
    notes, no_xla = [], dict(no_xla or {})
    source, compiles, compiled = SOURCES[source]
    if no_xla:
        why = "; an LSTM or GRU runs cuDNN's kernel there" if CUDNN in no_xla.values() else ""
        asked = "--xla on is not used: " if xla == "on" else ""  # helper-48: read as dropped unsaid
        notes.append(f"{asked}Keras compiles no XLA step for this model on a GPU host ({', '.join(no_xla)}{why}), so it "
                     "is planned without XLA.")
    planned_xla = source_xla(xla, function_jit)
    # jit_compile=True on a model with such layers: Keras warns and compiles no XLA (the note above says why).
    # A model Keras compiles no XLA step for gets the note above alone (helper-98: an LSTM's file was told to pass --xla on).
    if function_jit is not None and xla == "auto" and not no_xla:
        # A file holds what the saving host resolved "auto" to (keras/src/trainers/trainer.py stores the
        # resolved value): False on a host without a GPU, or for a model made under a strategy.
        saved = (' (a saved file holds what "auto" resolved to where it was saved: False without a GPU or '
                 'under a strategy)' if source == "the file" and not function_jit else "")
        notes.append(f"The step is planned {'with' if function_jit else 'without'} XLA: {compiles} with "
                     f"jit_compile={function_jit}{saved}, which Keras keeps on a GPU host (pass --xla "
                     f"{'off' if function_jit else 'on'} if you compile it again otherwise).")
    elif function_jit is not None and xla != "auto" and (xla == "on") != function_jit and not no_xla:
        notes.append(f"--xla {xla} is planned: {compiles} with jit_compile={function_jit}, which fit keeps "
                     "unless you compile the model again.")
    # An accumulator per variable, or an EMA copy, is memory: a replacing --optimizer drops it (helper-32).
    without = (f" (not its {' or '.join(dropped)}: omit --optimizer to plan the function's own optimizer with "
               f"{'them' if len(dropped) > 1 else 'it'})" if dropped else "")
    if function_optimizer is not None and optimizer is not None and function_optimizer.lower() != optimizer.lower():
        kept = ("of its compile, only the loss is kept" if function_loss else
                f"it compiles no loss, and the step trains with --loss {loss}" if loss else "it compiles no loss")
        notes.append(f"--optimizer {optimizer} is planned: {compiles} with {function_optimizer}; {kept}{without}.")
    elif function_optimizer is not None and optimizer is not None and dropped:
        notes.append(f"--optimizer {optimizer} is planned: a new {optimizer}, without the function's "
                     f"{' or '.join(dropped)} (omit --optimizer to plan the function's own optimizer with "
                     f"{'them' if len(dropped) > 1 else 'it'}).")
    elif function_optimizer is not None and optimizer is not None and not own_optimizer:
        # helper-49: the function's AdamW(learning_rate, weight_decay) replaced by --optimizer adamw, unsaid.
        notes.append(f"--optimizer {optimizer} is planned: a new {optimizer} with Keras's defaults, in place of "
                     f"{source}'s (the same slots; omit --optimizer to plan {source}'s own object).")
    if own_step and step_optimizers and optimizer:  # an inference plan runs nothing: decide says what to pass
        # helper-45: a GAN whose optimizers are made in __init__ was headed "adam" (--optimizer), which never trains it.
        notes.append(f"Its train_step may train with optimizers of its own ({', '.join(step_optimizers)}): the runs "
                     f"measure the step as it is, with them; --optimizer {optimizer} is only the optimizer the model is "
                     "compiled with, which that step need not use.")
    if own_compile and optimizer:  # an inference plan compiles nothing
        notes.append(f"Its class's own compile{own_compile} cannot take one optimizer and a loss: the runs keep what "
                     "the function's call of it set and compile the model again with keras.Model.compile.")
    if own_step and loss and function_loss is None:
        # helper-48: a distiller's compute_loss ignores it, and the plan said it trained with --loss's.
        notes.append(f"--loss {loss} is compiled; the model's own train_step or compute_loss decides whether its step "
                     "uses it.")
    if own_policies:
        count = sum(own_policies.values())
        listed = ", ".join(f"{name} on {layers}" for name, layers in sorted(own_policies.items()))
        # A fact of the model, whatever the method: a step run here says the 16-bit caveat apart (decide.main).
        # helper-94: layers built under a global policy the function then reset were said to "set" theirs.
        notes.append(f"{count} layer{'s' if count > 1 else ''} with weights "
                     f"{'hold a dtype policy of their' if count > 1 else 'holds a dtype policy of its'} own ({listed}; "
                     "given with dtype=, or the global policy when built): in the model, a global policy (--policy, "
                     f"--dtype) does not reach {'them' if count > 1 else 'it'}.")
    if unmeasured:
        eager = ("; run_eagerly=True runs fit without tf.function, a step not planned here"
                 if "run_eagerly" in unmeasured else "")
        notes.append(f"Not planned: the {', '.join(unmeasured)} of {compiled} (the plan is of a step with its "
                     f"loss and optimizer only{eager}).")
    if function_loss is not None and loss is not None and loss != function_loss:
        notes.append(f"--loss {loss} is not used: {compiles} the model with {function_loss}, "
                     "which fit trains with.")
    given = policy or (dtype if dtype not in (None, "float32") else None)
    if function_policy is not None and given is not None and given != function_policy:
        option = "--policy" if policy else "--dtype"
        notes.append(f"{option} {given} is not used: {source} sets {function_policy} itself, which overrides it.")
    if function_policy is not None:
        chosen, chosen_from = function_policy, source
    elif policy is not None:
        chosen, chosen_from = policy, "--policy"
    elif given is not None:
        chosen, chosen_from = given, "--dtype"
    else:
        chosen, chosen_from = "float32", "Keras's default"
    if chosen == "mixed_float16" and optimizer:
        # keras/src/trainers/trainer.py (Keras 3.15), Trainer.compile: auto_scale_loss=True wraps it (helper-48: unsaid).
        # Keras's own train_step scales the loss (keras/src/backend/tensorflow/trainer.py: self.optimizer.scale_loss);
        # one of the model's own does where it calls that (helper-98: said of a GAN that applies two optimizers of its own).
        scaled = ("a train_step of the model's own scales the loss only where it calls self.optimizer.scale_loss, and "
                  "the plan is of that step as it is." if own_step else
                  "the step scales the loss and unscales the gradients, and the plan is of that step.")
        notes.append("Under mixed_float16, Keras's compile wraps the optimizer in a LossScaleOptimizer unless it is one "
                     f"(auto_scale_loss=True): {scaled}")
    if function_loss is not None:
        used, used_from = function_loss, compiled
    else:
        used, used_from = loss, ("--loss" if loss else OWN_STEP if own_step else ADDED_LOSS if adds_loss else "")
    return ModelSetup(used, used_from, chosen, chosen_from, tuple(notes), no_xla, planned_xla,
                      compiled if planned_xla != xla else "--xla" if xla != "auto" else XLA_DEFAULT,
                      adds_loss and not own_step, tf_step)


def x_alone_note(error: str) -> str:
    """The note on a plan whose model's own ``train_step`` failed on ``(x, y)`` and ran on x alone
    (:attr:`snippets.lib.model_plan.ModelPlan.x_alone`: ``error``, that failure in one line).

    >>> print(x_alone_note("ValueError: too many values to unpack (expected 2)"))
    Its own train_step failed on a batch (x, y) (ValueError: too many values to unpack (expected 2)), so the runs fed it x alone, as keras-io's VAE and GAN take their batch. If your fit feeds it (x, y), the y made here did not suit the step: y has the output's shape, or class ids for a sparse loss (the loss it compiles, else --loss, decides which).
    """
    return (f"Its own train_step failed on a batch (x, y) ({error}), so the runs fed it x alone, as keras-io's VAE "
            "and GAN take their batch. If your fit feeds it (x, y), the y made here did not suit the step: y has the "
            "output's shape, or class ids for a sparse loss (the loss it compiles, else --loss, decides which).")


def run_notes(setup: ModelSetup | None, plan: model_plan.ModelPlan) -> ModelSetup | None:
    """``setup`` with the notes on what the plan's runs found (:func:`x_alone_note`); None stays None."""
    return replace(setup, notes=(*setup.notes, x_alone_note(plan.x_alone))) if setup and plan.x_alone else setup


def setup_lines(setup: ModelSetup | None, training: bool = True) -> list[str]:
    """What ``setup`` trains with, in one sentence, then each of its notes wrapped at 100 columns; an
    inference plan (``training`` False), or a rule plan of a step with no loss, gets its dtype policy
    and notes only."""
    if setup is None:
        return []
    added = f" plus the loss {ADDED_LOSS} computes" if setup.loss and setup.adds_loss else ""
    loss = (f"loss {setup.loss} ({setup.loss_from}){added}" if setup.loss else
            f"the loss {setup.loss_from} computes" if setup.loss_from else None)
    policy = f"dtype policy {setup.policy} ({setup.policy_from})."
    lines = [f"Trains with {loss}, {policy}" if training and loss else f"D{policy[1:]}"]
    return lines + [textwrap.fill(f"Note: {note}", 100, break_on_hyphens=False) for note in setup.notes]


def no_batch_fits(plan: model_plan.ModelPlan, capacity: int) -> bool:
    """Whether a measured (interpolated, extrapolated, compiled) plan fits no batch in ``capacity`` bytes per device."""
    return plan.method != "rule" and plan.total > capacity and plan.largest_batch(capacity) == 0


def no_batch_line(plan: model_plan.ModelPlan) -> str:
    """Why a plan that fits no batch (:meth:`snippets.lib.model_plan.ModelPlan.largest_batch` is 0) has no remedy."""
    least = min(plan.batches)
    smallest = "the smallest batch compiled" if plan.method == "compiled" else "the smallest batch run"
    return (f"No batch fits, by the same plan: at {least} per device, {smallest}, the step peaks at "
            f"{units.human_bytes(plan.peak_at(least))}, and what the model keeps, whatever the batch, must shrink "
            "(a sharded placement, smaller layers: docs/decide.md).")


def unknown_why(plan: model_plan.ModelPlan, capacity: int) -> str:
    """Why a plan over ``capacity`` bytes per device is not known not to fit, in the words that follow its figures; ""
    where it does not fit. Its figure is counted high there, and what is certain fits: past the largest run, the growth
    of the tensors that grow as the square of the batch, as if all were live at once
    (:meth:`~snippets.lib.model_plan.ModelPlan.square_extra`); under a 16-bit policy (not layers' own: those may be a
    few), the float32 copies this host works on, which a GPU does not make (:func:`snippets.lib.model_remedies.half_best_case`,
    itself without that growth). A step with both is not known where the second's best case fits."""
    h, extra = units.human_bytes, plan.square_extra(plan.device_batch)
    if units.computes_in_16_bits(plan.step.policy) and (best := half_best_case(plan)) <= capacity:
        return (f"as {'compiled' if plan.method == 'compiled' else 'run'} here in 16 bits through float32 copies that a "
                f"GPU does not make{' and with the tensors that grow as the square of the batch as if all were live at once' if extra else ''}; "
                f"its best case on a GPU, the bytes that grow with the batch halved{', without those tensors' if extra else ''}, "
                f"is {h(best)}, which fits. Check it with a step on the GPU (a plan of the model in float32 reads a higher "
                "best case, nearer the GPU's step, from float32 runs: its mixed_float16 remedy, the bytes of mixed_bfloat16's "
                "too, or precision_note).")
    if extra and max(plan.init_peak, plan.line_step_peak) <= capacity:
        return (f"{h(extra)} of it from the growth, past the largest run, of the tensors that grow as the square of the "
                f"batch, counted as if all were live at once; without that growth the line puts it at "
                f"{h(plan.line_step_peak)}, which fits. Check it with a run at your batch (docs/decide.md, \"Check a "
                "plan on this machine\").")
    return ""


def verdict_fits(plan: model_plan.ModelPlan, capacity: int) -> bool | None:
    """The verdict for ``capacity`` bytes per device: True (fits), False (does not), or None (not known:
    :func:`unknown_why`)."""
    return True if plan.total <= capacity else None if unknown_why(plan, capacity) else False


def fits_note(plan: model_plan.ModelPlan) -> str:
    """Why a "Fits" for ``plan`` is not certain, in sentences; "" where nothing makes it so."""
    # helper-51: a "Fits" a run then ran out of, for a step whose peak changed from one process to the next.
    note = ("Not certain: its runs peaked further apart than the margin covers (the caveats below say why)."
            if plan.order_apart else "")
    if unchecked(plan):
        note += (f" Not certain: no run reached your batch, and up to {plan.batches[-1]} per device the runs grew "
                 f"{grew_words(plan)}, so its figure is a line no run checked (the largest batch below stops there).")
    elif plan.method not in ("compiled", "rule") and plan.device_batch > model_plan.CHECKED_PAST >= plan.batches[-1]:
        # The how's "No run past" sentence, where a script reading "fits" sees it too (helper-73: an autoencoder's).
        note += (f" Not certain: no run past {plan.batches[-1]} per device checked the line at your batch, past the "
                 f"{model_plan.CHECKED_PAST} the benchmarks held such lines to: a peak that grows faster than linearly "
                 "in the batch would not show" + ("; --backend jax compiles your batch." if plan.jax else "."))
    return note.strip()


def jax_line(setup: ModelSetup | None) -> str:
    """What a run plan's sentence offers besides a larger ``--batch``: Keras on JAX, but not for a step it runs without
    jit, nor for a ``train_step(data)`` of the model's own, which ``--backend jax`` refuses (helper-58: StringLookup's,
    a dead end; helper-73: a Siamese network's)."""
    return "" if setup and (setup.tf_step or NO_JIT in setup.no_xla.values()) else JAX_LINE


def model_report(plan: model_plan.ModelPlan, capacity: int, card_name: str | None,
                 remedies_found: Sequence[BatchRemedy] = (), setup: ModelSetup | None = None, precision: str = "") -> str:
    """The text for a measured (or rule-planned) model: what it trains with, the peak, the verdict,
    how it was obtained, the batches that fit, remedies, caveats. ``capacity`` in bytes per device; ``precision``: why
    mixed precision is not a remedy (:func:`snippets.lib.model_remedies.precision_note`), or ""."""
    h = units.human_bytes
    step, setup = plan.step, run_notes(setup, plan)
    compiled, offer = plan.method == "compiled", jax_line(setup)
    if step.strategy != "mirrored":
        where = "one device"
    elif compiled:  # Keras on JAX: what was compiled is DataParallel's program, not a tf.distribute strategy
        where = f"keras.distribution.DataParallel over {step.devices} ({plan.device_batch} per device)"
    else:
        where = f"MirroredStrategy over {step.devices} ({plan.device_batch} per replica)"
    xla = ("the train step XLA-compiled (Keras on JAX)" if compiled else
           f"{'XLA-compiled step' if step.jit else 'step without XLA'}"
           f"{' (xla auto, as Keras decides on a GPU host)' if step.xla == 'auto' else ''}")
    init = "initialisation not compiled" if compiled else f"initialisation {h(plan.init_peak)}"
    lines = [f"{step.source}: {h(plan.weights_bytes)} of weights, {step.optimizer}, {where}, batch {step.batch}, "
             f"{xla}.", *setup_lines(setup),
             f"Step peak per device: {h(plan.step_peak)} ({init}).",
             textwrap.fill(plan.how(), 100, break_on_hyphens=False)]
    if plan.method in ("measured", "interpolated", "extrapolated"):
        # What such a figure came to on the benchmark's architectures (TensorFlow's steps; a compiled
        # Keras-on-JAX figure and a rule are other methods, which it did not measure).
        half = " No 16-bit plan is among those benchmarked." if model_plan.in_16_bits(plan) else ""
        lines.append(textwrap.fill(model_plan.accuracy_summary() + half, 100, break_on_hyphens=False))
    spare = capacity - plan.total
    against = ("each device's memory" if not card_name else f"JAX's default 75% pool of {'an' if card_name[0] in 'AEFHILMNORSX' else 'a'} {card_name}" if compiled
               else f"{card_name}'s allocator") + f", {hardware.SLACK_WORDS}"
    # The verdict holds the larger peak (ModelPlan.total); the initialisation's is said to be the one.
    peak = h(plan.total) + (" (initialisation, above the step)" if plan.init_peak > plan.step_peak else "")
    if spare >= 0:
        unsure = f" {fits_note(plan)}" if fits_note(plan) else ""
        lines.append(textwrap.fill(f"Fits: {peak} of {h(capacity)} ({against}), {h(spare)} to spare.{unsure}", 100,
                                   break_on_hyphens=False))
    elif why := unknown_why(plan, capacity):
        lines.append(textwrap.fill(f"Not known to fit: {peak} against {h(capacity)} ({against}), short by {h(-spare)}, "
                                   f"{why}", 100, break_on_hyphens=False))
    else:
        lines.append(textwrap.fill(f"Does not fit: {peak} against {h(capacity)} ({against}); short by {h(-spare)}."
                                   + hardware.within_pool_note(plan.total, capacity), 100, break_on_hyphens=False))
    if plan.method != "rule":
        largest = largest_batches(plan)
        source = "compiled steps" if compiled else "runs"
        pool = card_pool(plan)
        beyond = limit_note(plan, largest, pool, offer)
        if card_name not in largest:  # --device-memory, or a card the list below leaves out
            own = plan.largest_batch(capacity)
            per = f" ({own // plan.replicas} per replica)" if plan.replicas > 1 and own else ""
            # helper-70: 29677 for 1155 MiB, with no word that no run went past 256 (said once, where the cards' says it too).
            note = own and limit_note(plan, {"capacity": own}, lambda _: capacity, offer)
            note = f" {note}" if note and note != beyond else ""
            lines.append(textwrap.fill(f"Largest {'global ' if per else ''}batch that fits {h(capacity)} ({against}): "
                                       f"{own or 'none'}{per}, planned from the same {source}.{note}", 100))
        # No line breaks inside a card's figure (textwrap splits at ASCII whitespace only).
        fits = ", ".join(f"{name} {batch} ({h(pool(name))} per card)".replace(" ", "\xa0")
                         for name, batch in largest.items())
        over = f", the global batch over {step.devices} replicas" if step.strategy == "mirrored" else ""
        # An H100-80GB holds a smaller batch than an A100-80GB: less memory, and a larger reserve.
        over += (f"; each in JAX's default 75% pool, {hardware.SLACK_WORDS}" if compiled else
                 "; each in the card's allocator: its memory less the CUDA context and the reserve TensorFlow "
                 f"keeps, which grows with the compute capability, and {hardware.SLACK_WORDS}")
        beyond = f" {beyond}" if beyond else ""
        if compiled and (g := compiled_curve.group(plan)) > 1:  # said on decide.md alone, the batches read as arbitrary
            beyond += (f" Each a multiple of {g} per device, as every batch compiled: {g} divides your "
                       f"{plan.device_batch} per device and {compiled_curve.GROUPS}, so a loss over pairs or triplets "
                       "keeps whole groups.")
        lines.append(textwrap.fill(f"Largest batch that fits (planned from the same {source}{over}): {fits}.{beyond}",
                                   100).replace("\xa0", " "))
    if no_batch_fits(plan, capacity):
        lines.append(textwrap.fill(no_batch_line(plan), 100))
    if remedies_found:
        lines.append(f"Remedies that fit, derived from the {'compiled steps' if compiled else 'measurement'} "
                     "(figures per device):")
        # A figure that rounds to the capacity says by how much it is under (units.against).
        lines += [textwrap.fill(f"{rank}. {r.label}: {units.against(r.peak, capacity)}"
                                f"{', an ESTIMATE' if r.estimate else ''} "
                                f"({r.how}). Costs: {r.cost}.", 100, subsequent_indent="   ",
                                break_on_hyphens=False)
                  for rank, r in enumerate(remedies_found, 1)]
    accumulated = [peak for _, peak in plan.accumulated]
    if accumulated and min(accumulated) > capacity:  # helper-53: the rule's one accumulator said a wide MLP's fitted
        lines.append(textwrap.fill(
            f"Gradient accumulation does not fit: compiled with gradient_accumulation_steps={listed([str(k) for k, _ in plan.accumulated])} "
            f"at your batch over each, the accumulating step came to {h(min(accumulated))} or more per device: its "
            "accumulators, and the update it applies every k-th step, do not shrink with the micro-batch.", 100))
    elif plan.total > capacity and plan.method != "rule" and plan.step.accumulation == 1 and not plan.accumulated and not plan.optimizer_unused and (
            not (ks := model_accumulation.accumulations(plan.device_batch, compiled_curve.group(plan) if compiled else 1))
            or all(plan.peak_at(plan.device_batch // k) + plan.accumulator_extra > capacity for k in ks)):
        # helper-54: a batch of 300 had no k whose micro-batch fits, and nothing said so.
        b = plan.device_batch
        lines.append(textwrap.fill(
            f"Gradient accumulation does not fit: the step with gradient_accumulation_steps=2 peaked "
            f"{h(plan.accumulator_extra)} above the step without at {plan.batches[0]} per device (its accumulators, and "
            "the update it applies every k-th step), more than any micro-batch's step leaves room for."
            if plan.accumulator_extra else
            f"Gradient accumulation does not fit: at {b // ks[-1]} per device, the smallest micro-batch a "
            f"gradient_accumulation_steps up to 64 makes of your {b} (k={ks[-1]}), the step alone is planned at "
            f"{h(plan.peak_at(b // ks[-1]))}, over {h(capacity)}." if ks else
            f"Gradient accumulation: no gradient_accumulation_steps from 2 to 64 divides your {b} per device "
            "(plan a batch that one does, to see it).", 100))
    if precision:
        lines.append(textwrap.fill(precision, 100))
    if strategy := strategy_note(plan, capacity):
        lines.append(textwrap.fill(strategy, 100))
    if remedies_found:
        lines.append(textwrap.fill(
            "Not planned here (it changes your model's code): rematerialisation, keras.remat around whole "
            "blocks, which trades memory for a second forward pass of each block (keras.RematScope fails "
            "inside fit on TensorFlow for any layer whose call gets a keyword argument, including the `training` "
            "that fit passes to every layer that accepts one); measure the changed function with --model. See "
            "docs/activations.md.", 100))
    lines.append(textwrap.fill(plan.caveats, 100, break_on_hyphens=False))
    return "\n".join(lines)


#: Where a run step's largest batch stops at its last run: the other way to a line past it.
#: Whose share of the card a plan's capacity is (``"pool"`` in ``--json``).
TF_POOL, JAX_POOL = "TensorFlow's allocator", "JAX's default 75% pool"


def plan_json(plan: model_plan.ModelPlan) -> dict:
    """The plan's own figures (``--json``'s ``plan``: :data:`snippets.lib.model_json_keys.JSON_KEYS`' ``plan.*``),
    bytes per device."""
    return {"step": plan.step.fields(), "method": plan.method, "how": plan.how(), "batches": list(plan.batches),
            # The line's bytes at batch 0 at the reader's batch (ModelPlan.state): a fit's intercept, not
            # the weights, gradients and slots it can sit below.
            "peaks": list(plan.peaks), "per_sample": round(plan.per_sample), "intercept": round(plan.state),
            # Each batch's lower-quartile step (floor_step): how() caps the slope by the one between them.
            "floors": list(plan.floors),
            # Whether the planned step is XLA-compiled, as a GPU host resolves --xla auto.
            "jit": plan.step.jit,
            # A compiled plan compiles the train step only: its initialisation is not known.
            "init_peak": None if plan.method == "compiled" else plan.init_peak, "step_peak": plan.step_peak,
            "weights_bytes": plan.weights_bytes, "seconds_per_step_cpu": plan.seconds_per_step,
            "steps_run": list(plan.steps_run), "faster": list(plan.faster),
            "confirmed": [list(point) for point in plan.confirmed], "confirmed_for": plan.confirmed_for or None,
            "square": dict(zip(("per_square", "tensors", "largest", "higher"), plan.square)) or None,
            "confirm_failed": plan.confirm_failed or None, "checked": [list(point) for point in plan.checked], "accumulated": [list(point) for point in plan.accumulated], "accumulator_extra": plan.accumulator_extra or None}


def model_json(plan: model_plan.ModelPlan, capacity: int, card: str | None, model: str,
               remedies_found: Sequence[BatchRemedy] = (), setup: ModelSetup | None = None, precision: str = "") -> dict:
    """:func:`model_report` as a JSON-ready dict, every figure in bytes.

    ``card``: the card's name (None: ``--device-memory`` gave the capacity); ``pool`` says whose
    share of it ``capacity`` is. ``largest_global_batch``: per card, samples per step over all
    replicas; ``largest_batch_note``: :func:`~snippets.lib.batch_limits.limit_note` for the capacity's own batch, and
    ``largest_global_batch_note`` for the cards';
    ``line_checked_per_device``: :func:`line_checked`. ``setup``: :class:`ModelSetup`'s fields, or None.
    ``method``, ``how``, ``fits``, ``capacity``, ``card``, ``model``, ``setup`` and ``remedies`` are the keys a
    rule plan's JSON has too (``python -m snippets.decide --json``).
    """
    pool, setup = JAX_POOL if plan.method == "compiled" else TF_POOL, run_notes(setup, plan)
    # method and how at the top, where a rule plan's JSON has them (snippets.lib.rule_report.as_json).
    return {"model": model, "method": plan.method, "how": plan.how(), "plan": plan_json(plan),
            "setup": asdict(setup) if setup else None,
            "capacity": capacity, "fits": (fits := verdict_fits(plan, capacity)), "card": card,
            "pool": pool if card else None, "largest_batch": (own := plan.largest_batch(capacity)),
            "largest_batch_note": own and limit_note(plan, {"capacity": own}, lambda _: capacity, jax_line(setup)) or "",
            # The card planned for among them, also where the list of cards leaves it out (helper-34: an A100-40GB).
            "largest_global_batch": {**(cards := largest_batches(plan)), **({card: plan.largest_batch(capacity)} if card else {})},
            # helper-100: every card stopped at the largest run, and only the text said why.
            "largest_global_batch_note": limit_note(plan, cards, card_pool(plan), jax_line(setup)),
            # Per device, how far the line was checked: a largest batch past it is further out.
            "line_checked_per_device": line_checked(plan),
            "remedies": [asdict(r) for r in remedies_found],
            **({"remedies_note": no_batch_line(plan)} if no_batch_fits(plan, capacity) else {}),  # as the text says it
            "precision_note": precision, "strategy_note": strategy_note(plan, capacity),
            # helper-90: "fits": null said nowhere why, nor the 16-bit best case the text gives.
            "fits_note": fits_note(plan) if fits else hardware.within_pool_note(plan.total, capacity)[1:] if fits is False
            else (why := unknown_why(plan, capacity))[:1].upper() + why[1:],
            "caveats": plan.caveats}
