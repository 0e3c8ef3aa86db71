"""``python -m snippets.decide --model``'s measured and compiled plans, end to end in a kernel: what the function
prints, accumulation, the function's policy, Keras on JAX, a loss over pairs.

Split from tests/test_plan.py (the CLI's table, verdicts and refusals) so the two run on two workers: together
they were the suite's longest file. Kernel-side functions sit above the tests that call them.
"""

import subprocess
import sys

import pytest

from harness import ROOT, Kernel
from snippets import decide
from snippets.lib import model_source
from tests.test_plan import GiB, run_plan_cli


@pytest.fixture(scope="module")
def kernel():
    with Kernel() as k:
        yield k


def test_what_the_function_prints_goes_to_stderr_and_the_json_stays_whole():
    import json

    # TF_CPP_MIN_LOG_LEVEL as a reader has it: unset.
    done = subprocess.run([sys.executable, "-m", "snippets.decide", "--model", "tests.plan_builders:printing",
                           "--optimizer", "adam", "--method", "rule", "--json"], cwd=ROOT, capture_output=True,
                          text=True, env={"PATH": ""})
    code, out, err = done.returncode, done.stdout, done.stderr
    assert code == 0, err
    assert json.loads(out)["method"] == "rule"  # stdout is the JSON alone
    assert "built" in err.splitlines() and "Total params" in err  # model.summary() and print(), on stderr
    # TensorFlow's start-up lines (a cuda driver it cannot find, at import; cuInit's failure, at the LSTM's
    # first device listing while the model is built), which no TF_CPP_MIN_LOG_LEVEL silences, are not.
    from snippets.lib.errors import startup_noise

    assert not [line for line in err.splitlines() if startup_noise(line)], err


def test_the_functions_gradient_accumulation_is_measured_and_its_ema_is_named():
    from snippets.lib import planner
    from snippets.lib.model_source import SourceFacts

    weights = [planner.Weight((1024, 256)), planner.Weight((256,), trainable=False)]
    facts = SourceFacts(weights, None, "mse", "adam", False, {}, None, 4, True)
    assert decide.source_optimizer(facts) == (
        "adam", "No --optimizer: the function compiles with adam and gradient_accumulation_steps=4 (an accumulator "
        "per trainable variable, counted), which is measured (that optimizer, its settings kept); its "
        "use_ema=True keeps a copy of each trainable variable (1 MiB), which the figures below hold.")
    # The rule counts slots by the optimizer's name: not the averages.
    assert decide.source_optimizer(facts, "file", "planned by rule")[1].endswith(
        "counted), which is planned by rule; its use_ema=True keeps a copy of each trainable variable (1 MiB), which the "
        "figures below leave out: add it.")


def test_an_accumulating_functions_step_is_measured_through_an_update(kernel):
    import json

    assert kernel.call(_source_optimizer_state, "tests.plan_builders:accumulating") == (4, False, (), False)
    assert kernel.call(_source_optimizer_state, "tests.plan_builders:averaging") == (1, True, (), False)
    assert kernel.call(_source_optimizer_state, "tests.plan_builders:clipped") == (1, False, ("global_clipnorm=1.0",), False)
    # A LossScaleOptimizer's settings are those of the optimizer it wraps (helper-39: labelled "adam" without a word).
    assert kernel.call(_source_optimizer_state, "tests.plan_builders:loss_scaled") == (2, False, ("global_clipnorm=1.0",), True)
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:accumulating", "--strategy", "single",
                                           "--batch", "16", "--xla", "off", "--json"])
    assert code == 0, out
    plan = json.loads(out[out.index("{"):])
    assert plan["plan"]["step"]["optimizer"] == "adam" and plan["plan"]["step"]["accumulation"] == 4
    assert plan["plan"]["step"]["own_optimizer"] is True  # the function's Adam object runs, not a new one
    assert "gradient_accumulation_steps=4" in plan["setup"]["notes"][0]


def _source_optimizer_state(target: str) -> tuple[int, bool, tuple, bool]:
    """Kernel side: ``(accumulation, ema, clipping, loss_scaled)`` that :func:`snippets.lib.model_source.read_builder` reads."""
    facts = model_source.read_builder(decide.import_callable(target))
    return facts.accumulation, facts.ema, facts.clipping, facts.loss_scaled


def test_a_frozen_base_is_named_with_what_it_leaves_out(kernel):
    # helper-68: a frozen EfficientNetB0's plan said "16.05 MiB of weights" (0.6 MiB trainable), and nothing of the freeze.
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders_frozen:frozen_base", "--method", "rule"])
    assert code == 0, out
    text = " ".join(out.split())
    assert ("Note: 322 KiB of the 324.01 KiB of weights are not trainable (trainable=False): no gradients or optimizer "
            "slots for them") in text and "plan again when you unfreeze layers to fine-tune" in text
    assert "below the lowest trainable layer (so keras.remat saves nothing there)" in text  # remat is offered below
    assert "A frozen base's features can also be computed once" in text  # most of it frozen
    # The rule counts no gradient or Adam slot for them either: the head's 2.01 KiB, twice.
    assert "324.01 KiB 2.01 KiB 4.02 KiB" in text, out
    # Not a freeze: what no layer ever trains (helper-71: EfficientNetB0's input Normalization read as a freeze of 32 B).
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders_frozen:kept_by_design", "--method", "rule"])
    assert code == 0 and "not trainable" not in out, out


def test_compile_options_the_plan_leaves_out_are_named(kernel):
    # metrics (positional, after loss_weights=None) and run_eagerly; steps_per_execution=1 is the default.
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:with_metrics", "--method", "rule"])
    assert code == 0, out
    assert ("Note: Not planned: the metrics, run_eagerly of the function's compile (the plan is of a step with its "
            "loss and optimizer only; run_eagerly=True runs fit without tf.function, a step not planned here).") in " ".join(
                out.split()), out
    from snippets.lib.model_report import model_setup

    assert model_setup("mse", None).notes == ()  # nothing left out, nothing said


def refused_before_the_child(argv: list[str]) -> tuple[int, bool]:
    """Kernel side: ``decide``'s exit status, and whether it neither started a measuring child nor claimed the one
    an earlier plan left (kept for the next plan: ended here, the next test's plan would import TensorFlow again)."""
    from snippets.lib import fork_server

    before = fork_server._warm
    claims = before and before.claims
    code, _ = run_plan_cli(argv)
    return code, fork_server._warm is before and (before is None or before.claims == claims)


def test_bad_model_kwargs_are_refused_before_the_measuring_child_starts(kernel):
    # An audit: the child's TensorFlow import (about 700 MiB) began before a bad --model-kwargs was read.
    argv = ["--model", "tests.plan_builders:tiny", "--model-kwargs", "{size", "--optimizer", "adam"]
    assert kernel.call(refused_before_the_child, argv) == (2, True)


def test_a_model_json_file_takes_no_model_kwargs(kernel):
    code, out = kernel.call(run_plan_cli, ["--model-json", "any.json", "--model-kwargs", '{"size": 3}'])
    assert code == 2 and [line for line in out.splitlines() if line.strip()] == [
        "python -m snippets.decide: error: --model-kwargs passes keyword arguments to --model's function; a "
        "--model-json file takes none: drop --model-kwargs, or plan the function with --model"]


def test_a_readers_model_is_measured_with_the_policy_its_function_sets(kernel):
    import json

    # No --optimizer: the function compiled with a loss alone, so fit trains with compile's default.
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:tiny_mixed",
                                           "--strategy", "single", "--batch", "32", "--loss", "huber",
                                           "--policy", "mixed_bfloat16", "--json"])
    assert code == 0, out
    plan = json.loads(out[out.index("{"):])
    # The function sets its policy and compiles its loss after the planner's settings: those are what run.
    assert plan["plan"]["step"]["policy"] == "mixed_float16" and plan["plan"]["step"]["loss"] is None
    # And --xla auto on one device is what a GPU host resolves it to: an XLA step.
    assert plan["plan"]["step"]["optimizer"] == "rmsprop" and plan["plan"]["jit"] is True
    # Where a rule plan's JSON has them: how the figure was obtained, at the top.
    assert (plan["method"], plan["how"]) == (plan["plan"]["method"], plan["plan"]["how"])
    assert plan["setup"] == {
        "loss": "mse", "loss_from": "the function's compile", "policy": "mixed_float16",
        "policy_from": "the function", "no_xla": {}, "xla": "auto", "xla_from": "Keras's default", "adds_loss": False, "tf_step": False,
        "notes": ["No --optimizer: the function compiles without naming one, so fit trains with compile's default, "
                  "rmsprop, which is measured.",
                  "--loss huber is not used: the function compiles the model with mse, which fit trains with.",
                  "--policy mixed_bfloat16 is not used: the function sets mixed_float16 itself, which overrides it.",
                  "Under mixed_float16, Keras's compile wraps the optimizer in a LossScaleOptimizer unless it is one "
                  "(auto_scale_loss=True): the step scales the loss and unscales the gradients, and the plan is of that "
                  "step."]}
    # The reader's batch is one of those run, and the cards' largest batches are planned from the same runs as for
    # any batch: with the run at WIDE_BATCH this small step makes (cheap: model_plan.wide_reason).
    assert plan["plan"]["method"] == "measured" and plan["plan"]["batches"] == [16, 32, 256]
    assert "Measured" in plan["plan"]["how"] and plan["largest_global_batch"]["A100-80GB"] > 32
    assert plan["fits"] and plan["caveats"].startswith("Not measurable on a CPU")
    # One line as each run ends, as it ends (a 224 px ResNet50 takes minutes).
    done = [line for line in out.splitlines() if line.startswith("run ") and " done (" in line]
    assert [line.split(" done")[0] for line in done] == ["run 1 of 2", "run 2 of 2", "run 1 of 1"], out
    assert all("step peak " in line and line.endswith(" s since these runs began") for line in done)


def test_keras_on_jax_is_planned_by_xlas_compiled_analysis(kernel):
    import json

    from snippets.lib import model_plan  # no TensorFlow at import

    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:tiny", "--loss", "mse", "--optimizer",
                                           "adam", "--strategy", "single", "--batch", "512", "--backend", "jax",
                                           "--json"])
    assert code == 0, out
    plan = json.loads(out[out.index("{"):])
    # Past 256 per device a quarter is compiled too, to see a peak that grows faster than the batch.
    assert plan["plan"]["method"] == "compiled" and plan["plan"]["batches"] == [128, 256, 512]
    assert "XLA:CPU" in plan["plan"]["how"] and plan["pool"] == "JAX's default 75% pool"
    assert plan["card"] == "V100-SXM2-32GB" and plan["plan"]["init_peak"] is None
    # Keras on JAX has no TensorFlow executor, layout optimizer or inter-op pool to warn about.
    assert plan["caveats"].startswith("Compiled by XLA:CPU") and "inter-op" not in plan["caveats"]
    assert "NCCL" not in plan["caveats"]  # one device: no all-reduce
    assert plan["setup"]["loss"] == "mse" and plan["setup"]["loss_from"] == "--loss"
    # 32 -> 64 -> 8 floats per sample: the step's bytes grow with the batch, and the weights are in it.
    assert plan["plan"]["peaks"][2] > plan["plan"]["peaks"][1] > plan["plan"]["peaks"][0] > plan["plan"]["weights_bytes"]
    # DataParallel over 2 emulated devices: each device's partitioned program at 256 per device, the
    # same state whole on each, and the gradients' all-reduce on top of the one-device step.
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:tiny", "--loss", "mse", "--optimizer",
                                           "adam", "--strategy", "mirrored", "--devices", "2", "--batch", "1024",
                                           "--backend", "jax", "--json"])
    assert code == 0, out
    answer = json.loads(out[out.index("{"):])
    parallel = answer["plan"]
    assert answer["caveats"].endswith(model_plan.ALL_REDUCE_CAVEAT)
    assert parallel["method"] == "compiled" and parallel["batches"] == [128, 256, 512]
    assert "DataParallel over 2" in parallel["how"] and parallel["weights_bytes"] == plan["plan"]["weights_bytes"]
    assert parallel["peaks"][2] >= plan["plan"]["peaks"][2]
    # A loss over triplets, its own Adam, 3 MiB, a batch of 3075 (a multiple of 3, not of 2): the setup step trains on
    # 3 samples (2 cannot be triplets), every batch compiled or offered is a multiple of 3 as the reader's is, and the
    # step, over 3 MiB, has its accumulation remedy compiled with the builder's own optimizer given k, its micro-batch
    # a multiple of 3 too (helper-54: an estimate that did not fit; helper-55: odd batches offered to a loss over pairs).
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:triplet", "--strategy", "single", "--batch",
                                           "3075", "--backend", "jax", "--device-memory", "6MiB", "--json"])
    assert code == 0, out
    answer = json.loads(out[out.index("{"):])
    grouped = answer["plan"]
    assert answer["capacity"] == 3 * 2**20  # half of a pool this small (hardware.usable_bytes)
    assert all(b % 3 == 0 for b in grouped["batches"] + [b for b, _ in grouped["confirmed"]])
    assert all(b % 3 == 0 for b in answer["largest_global_batch"].values())
    assert all((3075 // k) % 3 == 0 for k, _ in grouped["accumulated"]) and not grouped["confirm_failed"]
    assert grouped["step_peak"] > 3 * 2**20 and grouped["accumulated"][-1][1] <= 3 * 2**20
    k, figure = grouped["accumulated"][-1]
    remedy = next(r for r in answer["remedies"] if r["label"].startswith(f"gradient_accumulation_steps={k} "))
    assert remedy["peak"] == figure and not remedy["estimate"], remedy


def _keras_optimizer_bytes(target: str) -> tuple[int, int]:
    """Kernel side: ``(slot bytes, trainable bytes)`` of the optimizer the function compiles, built by
    Keras on the model's variables (the scalars, iterations and learning rate, left out)."""
    import numpy as np

    model = decide.import_callable(target)()
    model.optimizer.build(model.trainable_variables)
    sized = [v for v in model.optimizer.variables if len(v.shape)]
    return (sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in sized),
            sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in model.trainable_variables))


def test_a_rule_plan_counts_the_functions_accumulators_with_the_slots():
    import json

    # Keras's own count: Adam's two slots and one accumulator per trainable variable (a kernel of its own:
    # building the optimizer starts TensorFlow's runtime).
    with Kernel() as fresh:
        slots, trainable = fresh.call(_keras_optimizer_bytes, "tests.plan_builders:accumulating")
        code, out = fresh.call(run_plan_cli, ["--model", "tests.plan_builders:accumulating", "--method", "rule",
                                              "--strategy", "single", "--devices", "1", "--json"])
        code_text, text = fresh.call(run_plan_cli, ["--model", "tests.plan_builders:accumulating", "--method",
                                                    "rule", "--strategy", "single", "--devices", "1"])
    assert slots == 3 * trainable
    assert code == code_text == 0, out + text
    plan = json.loads(out)
    assert plan["devices"][0]["slots"] == slots
    assert plan["notes"][0].startswith("No --optimizer: the function compiles with adam and "
                                       "gradient_accumulation_steps=4 (an accumulator per trainable variable, "
                                       "counted), which is planned by rule")
    assert "slots include the accumulators of gradient_accumulation_steps=4" in " ".join(text.split())
    assert "Trains with loss mse (the function's compile)" in text
    # And in the arithmetic: one accumulator per trainable variable, on the device or the host that updates it.
    from snippets.lib import planner

    weights = [planner.Weight((1024, 256)), planner.Weight((256,), trainable=False)]
    plain, accumulating = (planner.plan(weights, "adam", "single", 1, accumulation=k)[0].slots for k in (1, 4))
    assert accumulating - plain == 1024 * 256 * 4
    assert (planner.host_bytes(weights, "adam", "offload", 1, accumulation=4)
            - planner.host_bytes(weights, "adam", "offload", 1)) == 1024 * 256 * 4
    with pytest.raises(ValueError, match="gradient_accumulation_steps must be a positive integer"):
        planner.plan(weights, "adam", "single", 1, accumulation=0)


def test_a_remedy_never_names_a_precision_already_in_effect():
    from snippets.lib import planner

    kernel_32 = [planner.Weight((131072, 65536))]
    for policy in ("mixed_float16", None):
        found = decide.remedies(kernel_32, "adam", "mirrored", 8, 30 * GiB, policy)
        assert found and all(r.precision != policy for r in found), [r.label(8) for r in found]
    halves = decide.remedies([planner.Weight((131072, 65536), "float16")], "adam", "mirrored", 8, 30 * GiB)
    assert halves and all(r.precision != "float16" for r in halves)
    # A change from the reader's policy is one: mixed_float16 to float16 storage.
    assert any(r.precision == "float16" for r in decide.remedies(kernel_32, "adam", "mirrored", 8, 30 * GiB,
                                                                 "mixed_float16"))


def test_a_model_that_fixes_its_batch_gets_a_note_naming_the_batch_that_plans_it(kernel):
    argv = ["--model", "tests.plan_builders:fixed_batch", "--method", "rule"]
    code, out = kernel.call(run_plan_cli, [*argv, "--batch", "64"])
    assert code == 0, out
    assert ("Note: keras.Input fixes the batch at 8, but this plan is for 16 per device (--batch 64 over 4\n"
            "replicas): pass --batch 32 to plan the batch the model declares.") in out
    code, out = kernel.call(run_plan_cli, [*argv, "--batch", "32"])
    assert code == 0 and "keras.Input fixes" not in out, out


def test_a_json_file_of_a_class_keras_cannot_find_gets_one_short_line(tmp_path):
    path = tmp_path / "subclassed.json"
    with Kernel() as fresh:  # its own: the subclassed model is built on a batch, which starts the runtime
        path.write_text(fresh.call(_call, "tests.plan_builders:unregistered_json"))
        code, out = fresh.call(run_plan_cli, ["--model-json", str(path), "--optimizer", "adam"])
    lines = [line for line in out.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "config" not in out, out  # not Keras's kilobyte of config
    assert lines[0].endswith("the file names class 'SmallNet', which Keras cannot rebuild from a file unless it is "
                             "registered (keras.saving.register_keras_serializable) and imported: plan the "
                             "function that builds the model with --model module:function")


def test_a_saved_model_naming_an_object_of_its_own_gets_one_line_naming_it(tmp_path):
    # helper-91: keras-io's PointNet, its OrthogonalRegularizer unregistered, got "Functional could not be deserialized
    # properly" from the notebook's run of model.to_json(), and the class was named only in the error's cause.
    path = tmp_path / "regularized.json"
    with Kernel() as fresh:
        path.write_text(fresh.call(_call, "tests.plan_builders_saved:regularized_json"))
        built = fresh.call(_build_error, f"json:{path}")  # the measuring process's own build, as the notebook's runs
        code, out = fresh.call(run_plan_cli, ["--model-json", str(path), "--optimizer", "adam"])
    # Keras has an OrthogonalRegularizer of its own, which it rebuilt with this one's config: named from the config.
    assert built.startswith("the saved model names OrthogonalRegularizer (tests.plan_builders_saved), of your own, which "
                            "a fresh process cannot rebuild") and built.endswith("(--model, or ModelStep's model)"), built
    lines = [line for line in out.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and ("the file names OrthogonalRegularizer (tests.plan_builders_saved), which "
                                              "Keras cannot rebuild") in lines[0], out
    # A class registered in the reader's module is found only where that module was imported, which the planner
    # does not do for a file (decide.md says so): one line naming it too.
    path = tmp_path / "registered.json"
    with Kernel() as fresh:
        path.write_text(fresh.call(_call, "tests.plan_builders_saved:registered_json"))
    with Kernel() as fresh:
        code, out = fresh.call(run_plan_cli, ["--model-json", str(path), "--optimizer", "adam"])
    lines = [line for line in out.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "the file names class 'Doubled', which Keras cannot rebuild" in lines[0], out


def _build_error(model: str) -> str:
    """Kernel side: the one line :func:`snippets.lib.model_step.build` refuses ``model`` with."""
    from snippets.lib import model_step
    from snippets.lib.errors import ModelError

    try:
        model_step.build(model_step.ModelStep(model, loss="mse"))
    except ModelError as error:
        return str(error)
    return "built"


def _call(target: str):
    """Kernel side: what the function ``target`` (``module:function``) returns."""
    return decide.import_callable(target)()


def test_tensorflows_start_up_lines_are_held_back_and_the_rest_of_stderr_kept(capfd):
    import os

    from snippets.lib import cli

    with cli.quiet_tensorflow_start():
        os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
                    b"I0000 00:00:1796362183.983710    8979 cudart_stub.cc:31] Could not find cuda drivers\n"
                    b"E0000 00:00:1796362329.341291    9457 cuda_platform.cc:52] failed call to cuInit: (303)\n"
                    b"the reader's own line\n")
    assert capfd.readouterr().err == "the reader's own line\n"



def test_a_slow_read_shows_a_waiting_line_on_a_terminal_and_erases_it(monkeypatch, capsys):
    import os
    import pty
    import select
    import time

    from snippets.lib import cli

    monkeypatch.setattr(cli, "WAITING_AFTER", 0.05)

    def written(fd: int, seconds: float) -> None:
        """The block, with ``fd`` as stderr, when its work takes ``seconds``; what it writes again goes to sys.stderr."""
        saved = os.dup(2)
        os.dup2(fd, 2)
        try:
            with cli.quiet_tensorflow_start("reading mymodels:cnn ..."):
                time.sleep(seconds)
                os.write(2, b"refused: the one line\n")
        finally:
            os.dup2(saved, 2)
            os.close(saved)

    def drained(fd: int) -> bytes:
        found = b""
        while select.select([fd], [], [], 0.2)[0]:
            found += os.read(fd, 4096)
        return found

    main, terminal = pty.openpty()
    try:
        written(terminal, 0.5)
        # Shown while the read went on, then erased: a refusal after it is still the one line left on the screen.
        assert drained(main) == b"reading mymodels:cnn ...\r\x1b[K"
        # Quick: never shown. The timer is the block's only clock, so it gets seconds: at 0.05 s, a worker the CI's load
        # held back that long showed the line.
        monkeypatch.setattr(cli, "WAITING_AFTER", 5.0)
        written(terminal, 0)
        assert drained(main) == b""
    finally:
        os.close(main)
        os.close(terminal)
    # Not a terminal (a log, a pipe, CI): no line at all.
    read, write = os.pipe()
    written(write, 0.5)
    os.close(write)
    assert os.read(read, 4096) == b""
    os.close(read)
    assert capsys.readouterr().err == "refused: the one line\n" * 3


def test_a_loss_over_the_pairs_in_a_batch_is_run_at_the_readers_batch_and_stops_the_largest_batch(kernel):
    import json

    # helper-34: planned from 16, 32 and 256 at 0.24 of its step at 4096, and "fits" a cap that refused it.
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:contrastive", "--strategy", "single",
                                           "--batch", "4096", "--json"])
    assert code == 0, out
    plan = json.loads(out[out.index("{"):])
    batch, peak, line = plan["plan"]["faster"]
    assert batch == 4096 and peak > 2 * line and plan["plan"]["step_peak"] >= peak
    assert plan["method"] == "measured" and max(plan["largest_global_batch"].values()) == 4096
    # The runs' own graphs show the [B, B] logits (helper-83: where a larger peak hides them, they are added past the runs).
    assert plan["plan"]["square"]["tensors"] >= 2 and plan["plan"]["square"]["per_square"] >= 8, plan["plan"]["square"]


def test_pair_logits_hidden_at_the_run_are_never_planned_to_fit_past_it(kernel):
    import json

    # helper-83: a plan drawn through runs that a LayerNorm backward peaked in said "Fits" far past them, where the [B, 2B]
    # logits had overtaken it and a run ran out. Where the run short of 7247 shows no growth, the graphs' logits are added
    # past it and leave the verdict open; where one process's run draws some of them, the plan is refused: never "Fits".
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders_losses:hidden_pairs", "--strategy", "single",
                                           "--batch", "7247", "--device-memory", "6GiB", "--json"])
    # A refusal's JSON line is followed by its line on stderr: the first JSON document alone.
    plan = json.JSONDecoder().raw_decode(out[out.index("{"):])[0]
    if code:
        assert "its peak may grow faster than linearly" in plan["error"] and "no run here reaches 7247" in plan["error"]
        return
    runs, square = plan["plan"]["batches"], plan["plan"]["square"]
    assert 256 < runs[-1] < 7247 and not plan["plan"]["faster"], runs
    # [B, 2B] float32 at least twice (the logits and their gradient): 16 bytes per sample squared or more.
    assert square["tensors"] >= 2 and square["per_square"] >= 16, square
    extra = round(square["per_square"] * (7247 ** 2 - runs[-1] ** 2))
    assert plan["fits"] is None and plan["plan"]["step_peak"] - extra <= plan["capacity"] < plan["plan"]["step_peak"]
    assert plan["largest_batch"] < 7247 and "the square of the batch" in plan["how"]
