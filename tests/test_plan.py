"""The CLI ``python -m snippets.decide``: table, verdict, remedies, model inputs, bad input.

Runs that may import TensorFlow go to a kernel (the kernel-side functions sit
above the tests that call them) or to a subprocess.
"""

import contextlib
import io
import json
import subprocess
import sys

import pytest

from harness import ROOT, Kernel
from snippets import decide
from snippets.lib import model_source, private, rule_report
from snippets.lib.plan_caveats import COMPILED_HALF_CAVEAT, HALF_CAVEAT

SEED_ARGS = ["--shape", "131072", "65536", "--dtype", "float32", "--optimizer", "rmsprop",
             "--devices", "4", "--card", "V100-SXM2-32GB", "--strategy", "mirrored", "--batch", "64"]
GiB = 2**30


def _line_of(path: str, text: str) -> int:
    """The number of the first line of ``path`` (from the repository's root) that holds ``text``."""
    return next(number for number, line in enumerate((ROOT / path).read_text(encoding="utf-8").splitlines(), 1)
                if text in line)


def run(*argv):
    """The CLI in a subprocess (it may import TensorFlow; the pytest process must not)."""
    done = subprocess.run([sys.executable, "-m", "snippets.decide", *argv], cwd=ROOT,
                          capture_output=True, text=True, env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": ""})
    return done.returncode, done.stdout, done.stderr


@pytest.fixture(scope="module")
def kernel():
    with Kernel() as k:
        yield k


def test_a_batch_a_measured_step_cannot_split_is_refused_before_the_model_is_read():
    # The module does not exist: the batch's line comes first, so nothing (no TensorFlow) was imported for it.
    code, _, err = run("--model", "no_such_module:build", "--optimizer", "adam", "--devices", "3", "--batch", "100")
    assert code == 2 and err.splitlines()[-1].endswith(
        "error: batch 100 does not split over 3 replicas; use a multiple of 3"), err


def test_keras_on_jax_is_never_planned_by_the_rule():
    # The rule plans TensorFlow's placements against TensorFlow's allocator, not JAX's pool: refused
    # before anything is imported (the module does not exist).
    for extra in (["--method", "rule"], ["--strategy", "column", "--devices", "2"]):
        code, _, err = run("--model", "no_such_module:build", "--optimizer", "adam", "--backend", "jax", *extra)
        assert code == 2 and "error: --backend jax is planned by XLA's compiled analysis of a training step" in err
    # Nor a step Keras on JAX runs without jit (helper-49: --xla off was dropped, the jitted step planned unsaid).
    code, _, err = run("--model", "no_such_module:build", "--optimizer", "adam", "--backend", "jax", "--xla", "off")
    assert code == 2 and "error: --xla off compiles jit_compile=False, so Keras on JAX runs the step without jit" in err
    code, _, err = run("--shape", "64", "64", "--backend", "jax")
    assert code == 2 and err.splitlines()[-1].endswith("--backend jax plans a --model's training step: give "
                                                        "--model, or drop --backend jax"), err


def test_help_names_the_inputs():
    code, out, _ = run("--help")
    assert code == 0
    for option in ("--shape", "--model", "--model-json", "--optimizer", "--strategy", "--device-memory"):
        assert option in out


def run_plan_cli(argv: list[str]) -> tuple[int, str]:
    """Kernel side: run ``python -m snippets.decide`` in the kernel; return (exit status, stdout + stderr)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            status = decide.main(argv)
        except SystemExit as done:
            status = done.code if isinstance(done.code, int) else 1
    return status, out.getvalue()


def test_seed_table_verdict_and_ranked_remedies(kernel):
    code, out = kernel.call(run_plan_cli, SEED_ARGS)
    assert code == 0
    header = next(line for line in out.splitlines() if "weights" in line)
    assert header.split() == ["device", "weights", "grads", "slots", "activ.", "update", "init", "peak",
                              "step", "peak", "capacity", "fits"]
    rows = [line.split() for line in out.splitlines() if line.split()[-1:] in (["NO"], ["yes"])]
    assert len(rows) == 4
    for row in rows:
        assert row[1:7] == ["32", "GiB", "32", "GiB", "32", "GiB"]
        assert row[-3:] == ["30.25", "GiB", "NO"]
    # The update without XLA (MirroredStrategy turns it off) needs three more copies: 6 x 32 GiB.
    assert "Does not fit: device 0 peaks at 224.02 GiB in the update phase" in out
    assert "its allocator has 30.25 GiB" in out
    remedies = [line.strip() for line in out.splitlines() if line.strip()[:2] in {"1.", "2.", "3.", "4.", "5."}]
    assert remedies, out
    # One change (shard 4 ways, each shard's update compiled per device) ranks above two; the
    # smaller peak first (the row layout reads a quarter of the input).
    assert [line[3:].split(":")[0] for line in remedies[:2]] == ["4-way row shard", "4-way column shard"]
    assert "4-way column shard: peak 24.08 GiB per device, 6.17 GiB to spare" in remedies[1]
    assert not any("mirrored" in line or "parameter servers" in line for line in remedies)


def test_a_plan_that_fits_lists_no_remedies_and_json_has_every_field(kernel):
    code, out = kernel.call(run_plan_cli, [
        "--shape", "131072", "65536", "--optimizer", "rmsprop", "--strategy", "column"])
    assert code == 0 and "Fits:" in out and "Remedies" not in out
    code, out = kernel.call(run_plan_cli, [
        "--shape", "131072", "65536", "--optimizer", "rmsprop", "--strategy", "column", "--json"])
    import json

    planned = json.loads(out)
    fields = {"device", "weights", "gradients", "slots", "activations", "update_temporaries", "reserve",
              "init_peak", "step_peak", "capacity", "fits"}
    assert len(planned["devices"]) == 4 and all(fields <= set(row) for row in planned["devices"])
    row = planned["devices"][0]
    assert row["capacity"] == 30976 * 2**20 and row["reserve"] == 1050 * 2**20 and row["fits"] is True
    assert row["weights"] == row["gradients"] == row["slots"] == 8 * GiB
    assert planned["xla"] is True and planned["fits"] is True and planned["remedies"] == []


def test_a_plan_that_does_not_fit_lists_the_texts_remedies_in_its_json(kernel):
    import json

    code, text = kernel.call(run_plan_cli, SEED_ARGS)
    code_json, out = kernel.call(run_plan_cli, [*SEED_ARGS, "--json"])
    assert code == code_json == 0
    planned = json.loads(out)
    assert planned["fits"] is False and planned["remedies"]
    # The same remedies as the text, in its order, each in bytes.
    listed = [line.strip() for line in text.splitlines() if line.strip()[:2] in {"1.", "2.", "3.", "4.", "5."}]
    assert [line[3:].split(":")[0] for line in listed] == [r["label"] for r in planned["remedies"]]
    column = next(r for r in planned["remedies"] if r["label"] == "4-way column shard")
    assert (column["strategy"], column["precision"], column["changes"]) == ("column", "as given", 1)
    # "4-way column shard: peak 24.08 GiB per device, 6.17 GiB to spare" in the text.
    assert column["spare"] == 30976 * 2**20 - column["peak"] and abs(column["peak"] / GiB - 24.08) < 0.005


def test_a_plan_nothing_rescues_says_why_in_its_json_as_in_its_text(kernel):
    import json

    # The seed's kernel on one 16 GB card: no placement or precision of one device holds it.
    argv = [*SEED_ARGS[:SEED_ARGS.index("--devices")], "--devices", "1", "--card", "V100-PCIE-16GB"]
    code, text = kernel.call(run_plan_cli, argv)
    code_json, out = kernel.call(run_plan_cli, [*argv, "--json"])
    planned = json.loads(out)
    assert code == code_json == 0 and planned["fits"] is False and planned["remedies"] == []
    assert planned["remedies_note"].startswith("No placement or precision tried fits 1 device of ")
    assert planned["remedies_note"] in text
    # On an A100-80GB float16 rescues it; --top 0 lists no remedy, and neither output says that none fits.
    rescued = [*argv[:-1], "A100-80GB", "--top", "0"]
    listed_none = json.loads(kernel.call(run_plan_cli, [*rescued, "--json"])[1])
    assert listed_none["remedies"] == [] and "remedies_note" not in listed_none
    assert "No placement" not in kernel.call(run_plan_cli, rescued)[1]


def test_xla_off_turns_the_column_shard_into_a_miss(kernel):
    code, out = kernel.call(run_plan_cli, [
        "--shape", "131072", "65536", "--optimizer", "rmsprop", "--strategy", "column", "--xla", "off"])
    assert code == 0 and "Does not fit: device 0 peaks at 56.08 GiB in the update phase" in out


def test_one_device_never_offers_a_one_way_shard(kernel):
    code, out = kernel.call(run_plan_cli, [
        "--shape", "131072", "65536", "--optimizer", "rmsprop", "--strategy", "single", "--devices", "1"])
    assert code == 0 and "Does not fit" in out
    assert "1-way" not in out and "parameter servers" not in out


@pytest.mark.parametrize("memory_text", ["30976MiB", "32GiB", "32GB"])
def test_device_memory_units(kernel, memory_text):
    code, out = kernel.call(run_plan_cli, [
        "--shape", "1024", "1024", "--devices", "2", "--device-memory", memory_text, "--initializer", "zeros"])
    capacity = {"30976MiB": "30.25 GiB", "32GiB": "32 GiB", "32GB": "29.8 GiB"}[memory_text]
    assert code == 0 and capacity in out and "Fits:" in out


def seed_model_json(input_dim: int = 131072, units: int = 65536) -> str:
    """Kernel side: ``model.to_json()`` of the seed model, built without allocating its weights."""
    from snippets.lib.seed import seed_model

    with private.shapes_only():
        return seed_model(input_dim, units).to_json()


def tiny_model_json() -> str:
    """Kernel side: ``model.to_json()`` of tests/plan_builders.py's small uncompiled model (built
    without allocating, as the kernel's other tests need TensorFlow's runtime not started)."""
    from tests.plan_builders import tiny

    with private.shapes_only():
        return tiny().to_json()


def test_model_callable_and_json_agree_with_shapes(kernel, tmp_path):
    by_shapes = kernel.call(run_plan_cli, [
        "--shape", "131072", "65536", "--shape", "65536", "--optimizer", "adam", "--strategy", "column"])
    by_model = kernel.call(run_plan_cli, [
        "--model", "snippets.lib.seed:seed_model", "--optimizer", "adam", "--strategy", "column"])
    path = tmp_path / "seed.json"
    path.write_text(kernel.call(seed_model_json))
    by_json = kernel.call(run_plan_cli, [
        "--model-json", str(path), "--optimizer", "adam", "--strategy", "column"])
    assert by_shapes[0] == by_model[0] == by_json[0] == 0
    # Seed kernel Glorot-initialised, bias zeros: the shapes run assumes Glorot for the bias too,
    # which only changes the (tiny) bias transient, never the table's rounded cells.
    assert by_model[1] == by_json[1]
    assert by_model[1].splitlines()[:6] == by_shapes[1].splitlines()[:6]
    # Too large to run here, the seed is planned by rule, which needs no loss; a model that runs here
    # is measured, and its model.to_json() file needs --loss: said before any run.
    assert "--loss" not in by_json[1]
    small = tmp_path / "tiny.json"
    small.write_text(kernel.call(tiny_model_json))
    code, out = kernel.call(run_plan_cli, ["--model-json", str(small), "--optimizer", "adam"])
    assert code == 2 and "measuring" not in out
    assert out.strip().endswith("holds no loss (a model saved before it was compiled): pass --loss (e.g. --loss mse)")


def json_of_a_compiling_function() -> tuple:
    """Kernel side: model_json of a function that compiles (an AdamW object, as keras-io's ViT does) and of one
    that returns no model, and the weights a fresh reader of that JSON finds against the function's own."""
    from tests.plan_builders import not_a_model, tiny_adamw

    text = model_source.model_json(tiny_adamw)
    try:
        model_source.model_json(not_a_model)
    except model_source.ModelError as error:
        refusal = str(error)
    return (json.loads(text).get("compile_config"), [w.shape for w in model_source.read_json(text).weights],
            [w.shape for w in model_source.model_weights(tiny_adamw)], refusal)


def test_the_notebook_saves_a_compiling_function_as_json(kernel):
    # helper-32: the notebook's bare StatelessScope refused a function that compiles ("attempting to create
    # a variable while in a stateless scope"); model_json builds it as --model does, its compile skipped.
    compiled, rebuilt, built, refusal = kernel.call(json_of_a_compiling_function)
    assert not compiled and rebuilt == built == [(32, 64), (64,), (64, 8), (8,)]
    assert refusal.startswith("the function returns") and "not a keras.Model" in refusal


def own_policies_read() -> tuple:
    """Kernel side: :attr:`SourceFacts.own_policies` of layers given their own dtype, of a global policy set in the
    function, of the former's model.to_json() file and of a custom layer with a Dense inside; and the global
    policy after model_json of a function that sets one (it must be left as it was)."""
    import keras

    from tests.plan_builders import bf16_layers, custom_bf16_block, tiny_mixed

    model_source.model_json(tiny_mixed)
    return (model_source.read_builder(bf16_layers).own_policies, model_source.read_builder(tiny_mixed).own_policies,
            model_source.read_json(model_source.model_json(bf16_layers)).own_policies,
            model_source.read_builder(custom_bf16_block).own_policies, keras.config.dtype_policy().name)


def norms_read() -> tuple:
    """Kernel side: :attr:`SourceFacts.float32_layers` of a model with a BatchNormalization, a MultiHeadAttention
    without dropout and a nested LayerNormalization, of its ``model.to_json()`` file, and of a model with none."""
    from tests.plan_builders import tiny
    from tests.plan_builders_norms import normed

    return (model_source.read_builder(normed).float32_layers,
            model_source.read_json(model_source.model_json(normed)).float32_layers,
            model_source.read_builder(tiny).float32_layers)


def test_layers_that_compute_in_float32_under_a_16_bit_policy_are_named_beside_its_best_case(kernel):
    # helper-94: a 16-bit step's best case on a GPU halves what BatchNormalization and LayerNormalization keep, which
    # Keras computes in float32 on every device; a float32 plan's mixed_float16 remedy is that best case too.
    layers = {"BatchNormalization": 1, "MultiHeadAttention": 1, "LayerNormalization": 1}  # not the one with dropout
    assert kernel.call(norms_read) == (layers, layers, {})
    # XLA:CPU compiling each run took about 9 CPU-seconds. At batch 64 the plan lay on the chord to the run at 256,
    # whose eight-thread peak moved 2x between processes (2.36 and 5 MiB), and once read "Does not fit" at 1000 KiB.
    # The reader's batch is a run here, and the sequence long enough that activations dominate: in six plans the step
    # read 9.24-9.78 MiB (its best case, where printed, 5.2 MiB), around a 7.5 MiB capacity (half a pool under 256 MiB).
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders_norms:normed", "--model-kwargs", '{"length": 64}',
                                           "--strategy", "single", "--policy", "mixed_float16", "--batch", "32",
                                           "--device-memory", "15MiB", "--xla", "off"])
    text = " ".join(out.split())
    # Over its capacity as run here, while its best case on a GPU fits: the verdict that reads the best case.
    assert code == 0 and "Not known to fit" in text, out
    assert ("Under a 16-bit policy Keras keeps float32 tensors in this model, on a GPU too: 1 BatchNormalization and 1 "
            "LayerNormalization layers cast their inputs up, and 1 MultiHeadAttention layer without dropout computes its "
            "attention logits and softmax in float32;") in text, out


def model_setup_of(function_policy: str, **options) -> tuple:
    """The policy, where it came from and the notes of :func:`snippets.lib.model_report.model_setup`, loss mse."""
    from snippets.lib.model_report import model_setup

    setup = model_setup("mse", function_policy, **options)
    return setup.policy, setup.policy_from, setup.notes


def under_a_given_policy() -> tuple:
    """Kernel side: (own_policies, the function's policy) read under --policy mixed_float16, as the step is built:
    a model with no dtypes, one with a float32 head, a file saved in float32, and functions that set the policy (a
    16-bit one, and float32)."""
    from tests.plan_builders import float32_head, tiny, tiny_float32, tiny_mixed

    text = model_source.model_json(tiny)
    return [(facts.own_policies, facts.policy) for facts in (
        model_source.read_builder(tiny, "mixed_float16"), model_source.read_builder(float32_head, "mixed_float16"),
        model_source.read_json(text, "mixed_float16"), model_source.read_builder(tiny_mixed, "mixed_bfloat16"),
        model_source.read_builder(tiny_float32, "mixed_bfloat16"), model_source.read_builder(tiny_float32))]


def test_layers_with_a_dtype_of_their_own_are_named_and_not_offered_mixed_precision(kernel):
    # helper-32: Dense(..., dtype="mixed_bfloat16") layers were reported as "float32 (Keras's default)", and
    # --policy mixed_float16 as used, though it reaches none of them.
    layers, global_policy, from_json, custom, after = kernel.call(own_policies_read)
    assert layers == from_json == custom == {"mixed_bfloat16": 2} and global_policy == {} and after == "float32"
    # Read under --policy (helper-33): what it does not reach is named, and it is not taken for the function's.
    assert kernel.call(under_a_given_policy) == [({}, None), ({"float32": 1}, None), ({"float32": 2}, None),
                                                 ({}, "mixed_float16"), ({}, "float32"), ({}, None)]
    # A function that sets float32 overrides --policy as a 16-bit one does (helper-44: read as --policy's).
    assert model_setup_of("float32", policy="mixed_bfloat16") == (
        "float32", "the function", ("--policy mixed_bfloat16 is not used: the function sets float32 itself, which "
                                    "overrides it.",))
    args = decide.build_parser().parse_args(["--model", "pkg.mod:build", "--policy", "mixed_float16"])
    args.source = model_source.SourceFacts([], None, "mse", "adam", False, {}, None, own_policies=layers)
    assert decide.setup_of(args).notes[-1] == (
        "2 layers with weights hold a dtype policy of their own (mixed_bfloat16 on 2; given with dtype=, or the global "
        "policy when built): in the model, a global policy (--policy, --dtype) does not reach them.")
    # Measured: the 16-bit caveat once, and no mixed_float16 remedy, where the step does not fit (helper-33).
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:bf16_layers", "--strategy", "single",
                                           "--batch", "64", "--device-memory", "200KiB"])
    text = " ".join(out.split())
    # Its own layers' 16-bit dtype is not halved into a best case (they may be a few): over the pool, it does not fit.
    assert code == 0 and "Does not fit" in text and "Remedies that fit" in text, out
    assert text.count(" ".join(HALF_CAVEAT.split())) == 1 and "mixed_precision" not in text, out
    # Its layers compute in 16 bits under the float32 policy, and its runs said so (the 256 run brackets 64 here).
    assert "No 16-bit plan is among those benchmarked" in text, out
    # Compiled on JAX, XLA:CPU's 16-bit caveat instead (helper-43: XLA:CPU computes them in float32 too); planned by
    # rule, nothing ran or compiled here: no caveat about this host's kernels.
    for more, caveat in ((["--backend", "jax"], COMPILED_HALF_CAVEAT), (["--method", "rule"], None)):
        code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:bf16_layers", "--strategy", "single",
                                               "--batch", "64", *more])
        text = " ".join(out.split())
        assert code == 0 and "does not reach them" in text, (more, out)
        assert text.count("16-bit policy") == (1 if caveat else 0) and (caveat is None or caveat in text), (more, out)


def compiled_json_facts() -> tuple:
    """Kernel side: what the planner reads from ``model.to_json()`` of a compiled model (its compile_config),
    from the policy to ``jit_compile`` (the optimizer's accumulation and EMA: tests below)."""
    from tests.plan_builders import tiny_sgd

    return model_source.read_json(tiny_sgd().to_json())[1:7]


def test_an_optimizer_given_names_the_accumulation_and_ema_it_drops():
    # helper-32: --optimizer adam over a function compiled with Adam(gradient_accumulation_steps=4) planned
    # 33.82 MiB without a word; the function's own step peaked at 50.54 MiB.
    args = decide.build_parser().parse_args(["--model", "pkg.mod:build", "--optimizer", "adam", "--strategy", "single"])
    args.source = model_source.SourceFacts([], None, "mse", "adam", False, {}, None, accumulation=4, ema=True)
    assert decide.setup_of(args).notes == (
        "--optimizer adam is planned: a new adam, without the function's gradient_accumulation_steps=4 or "
        "use_ema=True (omit --optimizer to plan the function's own optimizer with them).",)
    args.optimizer = "sgd"
    assert decide.setup_of(args).notes[0].endswith(
        "of its compile, only the loss is kept (not its gradient_accumulation_steps=4 or use_ema=True: omit "
        "--optimizer to plan the function's own optimizer with them).")
    facts = model_source.SourceFacts([], None, "mse", "adam", False, {}, None, loss_scaled=True)
    assert decide.source_optimizer(facts, "function")[1].startswith(
        "No --optimizer: the function compiles with adam in a LossScaleOptimizer, which is measured")
    # helper-39: Adam(global_clipnorm=1.0) under --optimizer adam was planned without its clipping and without a word.
    args.source = model_source.SourceFacts([], None, "mse", "adam", False, {}, None, clipping=("global_clipnorm=1.0",))
    assert "(not its global_clipnorm=1.0: omit --optimizer" in decide.setup_of(args).notes[0]  # --optimizer sgd
    # Without --optimizer the function's own optimizer is planned, as main() records: nothing dropped.
    args.accumulation = 4
    assert decide.dropped_by_optimizer(args) == [] and decide.setup_of(args).notes[0].startswith("--optimizer sgd")


def test_a_json_file_of_a_compiled_model_trains_with_its_compile():
    # model_from_json compiles the model again from its compile_config, so that loss is what fit
    # trains with; the planner reads it there, as it reads a function's compile (a kernel of its own:
    # compiling starts TensorFlow's runtime, which this module's kernel must not).
    with Kernel() as fresh:
        # Saved on this CPU host, the compile_config holds jit_compile=False: "auto" as this host resolved it.
        assert fresh.call(compiled_json_facts) == (None, "huber_loss", "sgd", False, {}, False)
    # And the report says where that compile came from: the file, not a function.
    args = decide.build_parser().parse_args(["--model-json", "model.json", "--optimizer", "adam", "--loss", "mse",
                                             "--strategy", "single"])
    args.source = model_source.SourceFacts([], None, "huber_loss", "sgd", False, {}, False)
    setup = decide.setup_of(args)
    assert (setup.loss, setup.loss_from) == ("huber_loss", "the file's compile_config")
    assert (setup.xla, setup.xla_from) == ("off", "the file's compile_config")
    # Keras on JAX jits the step whatever jit_compile=True says: nothing chosen, nothing to note.
    args.source, args.backend = args.source._replace(jit_compile=True), "jax"
    assert decide.setup_of(args).xla_from == "Keras's default" and not [
        note for note in decide.setup_of(args).notes if "XLA" in note]
    args.source, args.backend = args.source._replace(jit_compile=False), "tensorflow"
    assert setup.notes == (
        "The step is planned without XLA: the file's compile_config compiles with jit_compile=False (a saved file "
        "holds what \"auto\" resolved to where it was saved: False without a GPU or under a strategy), which Keras "
        "keeps on a GPU host (pass --xla on if you compile it again otherwise).",
        "--optimizer adam is planned: the file's compile_config compiles with sgd; of its compile, only the loss "
        "is kept.",
        "--loss mse is not used: the file's compile_config compiles the model with huber_loss, which fit trains with.")
    # jit_compile=True on a model Keras compiles no XLA step for (cuDNN's LSTM): one note, and no refusal
    # under mirrored, whose step then has no XLA either.
    from snippets.lib.model_report import model_setup

    lstm = model_setup("mse", None, no_xla={"LSTM": private.CUDNN}, function_jit=True)
    assert lstm.xla == "on" and len(lstm.notes) == 1 and "cuDNN" in lstm.notes[0]
    # The report names the file as the reader gave it, not the measuring processes' "json:" form.
    from snippets.lib.model_step import ModelStep

    assert ModelStep("json:/data/model.json").source == "/data/model.json"
    assert ModelStep("pkg.mod:build").source == "pkg.mod:build"
    # --xla given wins, and says what the file would have done.
    args.xla = "on"
    assert decide.setup_of(args).xla == "on" and decide.setup_of(args).notes[0] == (
        "--xla on is planned: the file's compile_config compiles with jit_compile=False, which fit keeps unless "
        "you compile the model again.")


def seed_weights_and_context() -> tuple[list, bool, list]:
    """Kernel side: the seed model's weights as the planner reads them, whether TF's runtime started,
    and the shapes Keras then still meant to initialise once a small functional model was built."""
    import keras

    from snippets.lib.seed import seed_model

    weights = decide.model_weights(seed_model)
    started = private.runtime_started()
    pending = [tuple(v.shape) for v in private.uninitialised_variables()]
    # Building a model closes a StatelessScope, which initialises every variable on that list: the
    # seed's 32 GiB kernel (an OOM on a smaller host, 32 GiB taken on a larger one) had it stayed there.
    inputs = keras.Input((4,))
    keras.Model(inputs, keras.layers.Dense(2)(inputs))
    return weights, started, pending


def test_model_is_read_without_allocating(kernel):
    weights, runtime_started, pending = kernel.call(seed_weights_and_context)
    assert [(w.shape, w.dtype, w.initializer) for w in weights] == [
        ((131072, 65536), "float32", "GlorotUniform"), ((65536,), "float32", "Zeros")]
    assert runtime_started is False
    assert pending == []


def test_benchmark_returns_figures(kernel):
    figures = kernel.call(decide.benchmark, 3)
    print(f"planner on the full seed model: first {figures['first_s']:.3f} s, best {figures['best_s']:.3f} s")
    assert figures["repeats"] == 3 and 0 < figures["best_s"] <= figures["first_s"]


@pytest.mark.parametrize("argv, message", [
    (["--shape", "0", "5"], "dimension 0 of shape [0, 5] is 0; every dimension must be a positive integer"),
    (["--shape", "-3", "5"], "dimension 0 of shape [-3, 5] is -3"),
    (["--shape", "3.5", "2"], "argument --shape: invalid int value: '3.5'"),
    (["--dtype", "float8"], "unknown dtype 'float8'"),
    (["--optimizer", "adamx"], "unknown optimizer 'adamx'"),
    (["--devices", "0"], "device count must be a positive integer, not 0"),
    (["--strategy", "column", "--devices", "3"],
     "cannot split dimension 1 of shape [131072, 65536] (size 65536) into 3 equal shards"),
    (["--device-memory", "lots"], "'lots' is not a memory size"),
    # helper-77: a byte figure from --json, read as MiB, planned a pool of 867 TiB and offered a batch of two billion.
    (["--device-memory", "909680640"], "--device-memory 909680640 has no unit: write 909680640B for bytes (decide "
                                       "--json's figures are bytes) or a size with its unit, such as 4GiB"),
    (["--card", "V100"], "unknown card 'V100'; use one of V100-SXM2-32GB"),
    (["--batch", "0"], "--batch must be a positive integer, not 0"),
    (["--xla", "maybe"], "argument --xla: invalid choice: 'maybe'"),
    (["--initializer", "foo"], "argument --initializer: invalid choice: 'foo' (choose from"),
    (["--policy", "mixed_float16", "--dtype", "float16"],
     "--policy mixed_float16 stores float32 variables, not --dtype float16; drop --dtype or --policy"),
])
def test_bad_input_exits_2_with_one_line(argv, message):
    code, out, err = run(*argv)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert "Traceback" not in err
    assert lines[0].startswith("usage: python -m snippets.decide")
    assert lines[-1].startswith("python -m snippets.decide: error: ") and message in lines[-1]
    assert len([line for line in lines if "error:" in line]) == 1


def test_an_own_train_step_that_fails_on_the_batch_is_told_how_its_targets_were_made(kernel):
    # A new user's trial: a train_step computing a sparse loss itself, no loss compiled, failed on targets
    # shaped as the output, with nothing saying --loss decides them. helper-61: keras-io's masked language model, whose
    # step unpacks (x, y, sample_weight) or (x, y), the same (decide.md says it gets two).
    argv = ["--model", "tests.plan_builders:own_step_class_ids", "--strategy", "single", "--optimizer", "adam",
            "--batch", "32"]
    code, out = kernel.call(run_plan_cli, argv)
    assert code == 2 and "Traceback" not in out and out.strip().splitlines()[-1].endswith(
        "; y has the output's shape, or class ids for a sparse loss: pass --loss for the loss it computes)")
    code, out = kernel.call(run_plan_cli, [*argv, "--loss", "sparse_categorical_crossentropy"])
    assert code == 0 and "Measured: real fit steps" in " ".join(out.split()), out
    # With a loss compiled it is tried on x alone too (helper-49: keras-io's DDIM compiles one and takes x alone), and
    # both errors are said, the targets' by the compiled loss (helper-48: keras-io's captioning got Keras's error bare).
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:own_step_class_ids_compiled", *argv[2:]])
    last = out.strip().splitlines()[-1]
    assert code == 2 and "Traceback" not in out and "failed on a batch (x, y), " in last and ", and on x alone, " in last
    assert last.endswith("y has the output's shape, or class ids for a sparse loss: the loss it compiles, mse, decides "
                         "which)"), out


def test_a_loss_that_takes_targets_of_another_shape_is_refused_saying_which_targets_were_made(kernel):
    # helper-57: keras-io's DeepSpeech2 compiles a CTC loss (label sequences as y); its plan ended on TensorFlow's
    # "Dimensions must be equal ... compile_loss/ctc_loss", and on JAX on "too many values to unpack".
    for more, made in (([], "(16, 20, 6) float32"), (["--backend", "jax"], "(2, 20, 6) float32")):
        code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:ctc_tagger", "--strategy", "single",
                                               "--batch", "32", *more])
        last = " ".join(out.strip().splitlines()[-1].split())
        assert code == 2 and "Traceback" not in out, (more, out)
        assert last.startswith("python -m snippets.decide: error: tests.plan_builders:ctc_tagger's loss (ctc_labels) "
                               "failed on the targets made for it, "), (more, last)
        assert f"(y: {made}; a target has its output's shape" in last and "{{node" not in last, (more, last)
        assert last.endswith("add the loss with add_loss, as keras-io's captcha OCR does)"), (more, last)


def optimizers_applied() -> tuple:
    """Kernel side: :func:`snippets.lib.optimizers.applied` of an Adam never applied, the same after one step, and a
    LossScaleOptimizer whose only step had non-finite gradients (which counts no iteration)."""
    import keras
    import numpy as np

    from snippets.lib import optimizers

    variable = keras.Variable(np.ones(4, "float32"))
    adam, scaled = keras.optimizers.Adam(), keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam())
    before = optimizers.applied(adam)
    adam.apply_gradients([(np.ones(4, "float32"), variable)])
    scaled.apply_gradients([(np.full(4, np.inf, "float32"), variable)])
    return before, optimizers.applied(adam), int(scaled.iterations.numpy()), optimizers.applied(scaled)


def test_a_train_step_that_never_applies_the_compiled_optimizer_is_offered_no_accumulation(kernel):
    # helper-98: keras-io's DCGAN applies a d_optimizer and a g_optimizer of its own; "gradient_accumulation_steps=2
    # (same effective batch)" was offered on the optimizer fit is compiled with, which it never applies.
    assert kernel.call(optimizers_applied) == (False, True, 0, True)
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders_gan:gan", "--optimizer", "rmsprop", "--strategy",
                                           "single", "--batch", "64", "--xla", "off", "--device-memory", "200MiB"])
    text = " ".join(out.split())
    assert code == 0 and "Does not fit" in text and "Remedies that fit" in text, out
    assert "Gradient accumulation is not offered: the runs never applied the optimizer the model is compiled with" in text
    assert "gradient_accumulation_steps=" not in text.split("Remedies that fit", 1)[1], out
    assert "Gradient accumulation does not fit" not in text, out


def test_keras_ios_distiller_is_measured_with_what_its_own_compile_set(kernel):
    # helper-48: keras-io's Keras 3 Distiller overrides compute_loss and compiles none; it was refused for no loss, and
    # with --loss the plan said it trained with that loss, which its compute_loss never reads. Its own compile(optimizer,
    # metrics, student_loss_fn, ...) then had it refused, with advice (plan the parts apart) that left the teacher out.
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:distiller", "--strategy", "single",
                                           "--loss", "sparse_categorical_crossentropy", "--batch", "16"])
    text = " ".join(out.split())
    assert code == 0 and "Trains with loss sparse_categorical_crossentropy (--loss)" in text, out
    assert "fed it x alone" not in text  # its compute_loss took (x, y)
    assert ("Its class's own compile(optimizer, metrics, student_loss_fn, distillation_loss_fn, alpha=0.1, "
            "temperature=3) cannot take one optimizer and a loss: the runs keep what the function's call of it set "
            "and compile the model again with keras.Model.compile.") in text, out
    assert "--loss sparse_categorical_crossentropy is compiled; the model's own train_step or compute_loss decides" in text
    from snippets.lib import model_report

    assert model_report.model_setup(None, None, loss="mse", own_step=True).notes == (
        "--loss mse is compiled; the model's own train_step or compute_loss decides whether its step uses it.",)
    assert not model_report.model_setup("mse", None, loss=None, own_step=True).notes  # the function's own compile
    assert not model_report.model_setup(None, None, own_compile="(a, b)").notes  # inference: nothing is compiled
    assert model_report.setup_lines(model_report.model_setup(None, None, optimizer="adam", own_step=True))[0] == (
        "Trains with the loss its own train_step or compute_loss computes, dtype policy float32 (Keras's default).")


def test_a_model_whose_input_fixes_its_batch_is_told_why_a_run_at_another_failed():
    from snippets.lib.model_batch import fixed_batch_failure

    # helper-48: keras-io's Switch Transformer reshapes to the batch its keras.Input declares, and failed at 16 bare.
    assert fixed_batch_failure("ValueError: Cannot reshape", 50, (16, 32)) == (
        "a run of the step failed (ValueError: Cannot reshape); the model's keras.Input fixes the batch at 50, and the "
        "runs are at 16 and 32 per device: a step that runs at its declared batch only is no line in the batch, so make "
        "its shapes follow the batch (keras.ops.shape(x)[0], not 50) to plan it")
    # No batch declared, or one the runs take: the run's own line stands.
    assert fixed_batch_failure("ValueError: x", None, (16, 32)) is None
    assert fixed_batch_failure("ValueError: x", 32, (16, 32)) is None
    # Not declared, but a run reshaped to a size it does not have (helper-74: the Switch Transformer as keras-io writes
    # it, which got TensorFlow's whole message): TensorFlow's graph and eager words, and JAX's.
    for error in ("ValueError: Cannot reshape a tensor with 512 elements to shape [128,4] (2048 elements) for '{{node r}}'",
                  "InvalidArgumentError: Input to reshape is a tensor with 512 values, but the requested shape has 2048",
                  "TypeError: cannot reshape array of shape (32, 4, 4) (size 512) into shape (128, 4) (size 2048)"):
        line = fixed_batch_failure(error, None, (16, 32))
        assert line.startswith("a run of the step failed (") and "{{node" not in line, line
        assert line.endswith("make its shapes follow the batch (keras.ops.shape(x)[0], not a constant) to plan it")


def test_a_model_that_reshapes_to_a_fixed_batch_in_its_code_is_told_so_in_one_line(kernel):
    # helper-74: keras-io's Switch Transformer, its batch fixed in its code, got TensorFlow's whole Reshape message.
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders_shapes:fixed_reshape", "--strategy", "single"])
    last = out.strip().splitlines()[-1]
    assert code == 2 and last.startswith("python -m snippets.decide: error: a run of the step failed (Cannot reshape a "
                                         "tensor with "), out
    assert "{{node" not in last and last.endswith("(keras.ops.shape(x)[0], not a constant) to plan it"), last
    # An op that meets the batch and a size fixed in the code (helper-87: keras-io's DDIM, its noise at batch_size).
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders_shapes:fixed_add", "--strategy", "single"])
    last = out.strip().splitlines()[-1]
    assert code == 2 and last.startswith("python -m snippets.decide: error: a run of the step failed ("), out
    assert "(Dimensions must be equal, but are " in last and "{{node" not in last and ") and 64, a size fixed" in last
    assert last.endswith("(keras.ops.shape(x)[0], not a constant) to plan it"), last


def test_a_run_that_fails_at_a_batch_the_reader_did_not_ask_for_names_that_run(kernel):
    # helper-96: keras.RematScope("larger_than") failed in the planner's own run at 256 per device, where the reader's
    # batch trained, and the plan was refused with the bare error, naming neither that run nor the runs the plan makes.
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders_shapes:small_batches_only", "--strategy",
                                           "single", "--xla", "off", "--batch", "64"])
    last = out.strip().splitlines()[-1]
    assert code == 2 and last.startswith("python -m snippets.decide: error: a run of the step failed (InvalidArgumentError: "
                                         "assertion failed: [this layer takes under 100 samples]"), out
    assert "(the run at a global batch of 256))" in last and last.endswith("'Your own model', lists the runs)"), last


def test_a_killed_planner_ends_through_python_and_takes_an_optimizer_as_keras_names_it():
    # helper-74: `kill -TERM` on the planner left its measuring child and runs going to the end of their set; the default
    # action skips the cleanup that ends them (fork_server.Server.run), which SystemExit runs.
    script = ("from snippets.lib import cli; cli.exit_on_signals(); import os, signal, time; "
              "os.kill(os.getpid(), signal.SIGTERM); time.sleep(30)")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, timeout=60)
    assert done.returncode == 128 + 15  # sys.exit's, as the shell reports a SIGTERM; killed, it would read -15
    # And "Adam", as Keras takes it (helper-74 was refused).
    assert decide.build_parser().parse_args(["--optimizer", "Adam"]).optimizer == "adam"


@pytest.mark.parametrize("argv, usage", [(["--model", "no_such_module:build"], False), (["--top", "-1"], True)])
def test_a_refusal_under_json_prints_its_line_as_json_too(argv, usage):
    # helper-48: a script reading --json's stdout read nothing on a refusal. The line stays on stderr, as without --json.
    import json

    code, out, err = run(*argv, "--json")
    line = err.strip().splitlines()[-1].split("error: ", 1)[1]
    assert code == 2 and json.loads(out) == {"error": line} and ("usage:" in err) == usage


@pytest.mark.parametrize("argv, message", [
    (["--model", "no_such_module:build"], "cannot import 'no_such_module' for --model"),
    (["--model-json", "/no/such/file.json"], "cannot read --model-json /no/such/file.json"),
])
def test_a_model_that_cannot_be_read_exits_2_with_its_line_alone(argv, message):
    # The options parsed: argparse's usage block would only bury the line that names the fix.
    code, out, err = run(*argv)
    assert code == 2 and out == "" and "Traceback" not in err and "usage:" not in err
    assert err.strip().splitlines() == [f"python -m snippets.decide: error: {err.split('error: ', 1)[1].strip()}"]
    assert message in err


@pytest.mark.parametrize("argv, message", [
    (["--model", "tests.plan_builders:unbuilt"],
     "tests.plan_builders:unbuilt: the model has no weights yet: give it a keras.Input(shape), or in the "
     "function call model.build(input_shape) (a Sequential) or call the model once on a batch"),
    (["--model", "tests.plan_builders:subclassed_unbuilt"],
     "the model has no weights yet: give it a keras.Input(shape), or in the function call "
     "model.build(input_shape) (a Sequential) or call the model once on a batch (a subclassed one: model(x))"),
    (["--model", "tests.plan_builders:distiller_not_compiled", "--strategy", "single"],
     "distiller_not_compiled: the function's model has its own compile(optimizer, metrics, student_loss_fn, "
     "distillation_loss_fn, alpha=0.1, temperature=3), which the function does not call: call it there as you do "
     "before fit, so that what its step reads is set; the planner keeps that and compiles the model again with "
     "keras.Model.compile"),
    (["--model", "tests.plan_builders:gan_without_call", "--strategy", "single"],
     "tests.plan_builders:gan_without_call: NoCallGAN does not say what it takes: its class defines no call() "
     "(keras-io's GAN and VAE have none; fit runs train_step), so give it one that runs the networks train_step feeds "
     "the batch to (a GAN's discriminator on x, a VAE's encoder and decoder), and call it once on a batch in the "
     "function (model(x))"),
    (["--model", "tests.plan_builders:text_any_length", "--strategy", "single"],
     "a TextVectorization layer has no output_sequence_length, so its sequences are as long as your texts"),
    (["--model", "tests.plan_builders:closed_lookup_inside", "--strategy", "single"],
     "has num_oov_indices=0, so a value outside its vocabulary fails the step, and the planner cannot tell which values "
     "it takes: plan it with num_oov_indices=1 (one more row in what follows it), or let it take one of the model's "
     "keras.Input directly"),
    (["--model", "tests.plan_builders:any_length", "--strategy", "single"],
     "tests.plan_builders:any_length: the model's input (batch, None) has an unknown dimension: give keras.Input a "
     "full shape (e.g. a fixed sequence length or image size), or let your function take it as an argument and pass it "
     "with --model-kwargs, such as '{\"seq\": 20}' or '{\"size\": 96}'"),  # helper-58: no word of --model-kwargs for
    # ESPCN's (None, None, 1); helper-70: a text model's length, which the page passes as "seq"
    (["--model", "tests.plan_builders:two_any_length", "--strategy", "single"],
     "the model's inputs 'title' (batch, None), 'body' (batch, None) have an unknown dimension: give each keras.Input "
     "a full shape"),
    (["--model", "tests.plan_builders:augmented", "--backend", "jax"],
     "Keras on JAX runs this model's step without jit (RandomRotation: layers it does not compile)"),
    (["--model", "tests.plan_builders:tiny_jit_off", "--backend", "jax"],
     "the function's compile sets jit_compile=False, so Keras on JAX runs the step without jit"),
    (["--model", "tests.plan_builders:own_step_x_only", "--backend", "jax", "--strategy", "single"],
     "own train_step(data) is TensorFlow's form; Keras on JAX calls train_step(state, data), a stateless step: "
     "plan it without --backend jax"),
    (["--model", "snippets.lib.seed:seed_model", "--loss", "mse", "--backend", "jax", "--strategy", "single"],
     "--backend jax builds the model and its optimizer on this host to compile the step (one copy), more than "
     "this host can spare: plan it by rule with --strategy data_parallel"),
    (["--model", "tests.plan_builders:tiny_jit_on"],
     "the function's compile sets jit_compile=True, and an XLA step under --strategy mirrored cannot"),
    (["--model", "tests.plan_builders:failing"],
     "building the model from tests.plan_builders:failing failed: ValueError: the reader's bug"),
    (["--model", "tests.plan_builders:stateful_rnn"],
     "tests.plan_builders:stateful_rnn: a layer creates a variable from a value while the model is built (a "
     "stateful=True RNN's states"),
    (["--model", "tests.plan_builders_shapes:array_variable"],  # helper-87's keras-io Swin, and the way out it was given
     "or keras.Variable(array), as keras-io's Swin Transformer makes its relative_position_index and attn_mask), which "
     "the planner's build without values cannot do: plan the model with stateful=False (the same weights and step; the "
     "states are [batch, units] each), or give the variable an initializer: self.add_weight(shape=array.shape, "
     "dtype=..., trainable=False, initializer=keras.initializers.Constant(array)). Here: tests/plan_builders_shapes.py "
     f"line {_line_of('tests/plan_builders_shapes.py', 'keras.Variable(table')}, in _PositionBias.build: "
     "keras.Variable(table, trainable=False))"),
    (["--model", "tests.plan_builders:stateful_rnn"],  # a layer Keras ships: the reader's line that calls it
     f"Here: tests/plan_builders.py line {_line_of('tests/plan_builders.py', 'stateful=True')}, in stateful_rnn: model = "),
    (["--model", "no_such_module:build"], "(run from the directory that holds it, or add that directory to PYTHONPATH)"),
    (["--model", "tests.plan_builders:needs_width"],
     "failed: TypeError: needs_width() missing 1 required positional argument: 'width' (pass the function's "
     "arguments with --model-kwargs '{\"name\": value}')"),
    # helper-57: a loss named by mistake was told to take --model-kwargs.
    (["--model", "tests.plan_builders_losses:ctc_labels"],
     "missing 2 required positional arguments: 'y_true' and 'y_pred' (y_true and y_pred are a loss's: --model names a "
     "function that returns a model)"),
    (["--model", "tests.plan_builders:not_a_model"],
     "tests.plan_builders:not_a_model: the function returns dict, not a keras.Model: return the model it builds"),
    (["--model", "tests.plan_builders:tiny", "--model-kwargs", "[1]"], "--model-kwargs must be a JSON object"),
    (["--model", "tests.plan_builders:tiny", "--model-kwargs", "{size"], "--model-kwargs is not JSON"),
    (["--model", "tests.plan_builders:tiny", "--strategy", "single"], "or pass --loss (e.g. --loss mse)"),
    (["--model", "tests.plan_builders:tiny", "--loss", "mse", "--xla", "on"],
     "--xla on under --strategy mirrored cannot be measured on this CPU's emulated devices"),
    (["--model", "tests.plan_builders:tiny", "--loss", "nosuchloss"],
     "--loss 'nosuchloss' is not a Keras loss: give a name keras.losses.get knows"),
])
def test_a_readers_model_that_cannot_be_planned_gets_one_line(kernel, argv, message):
    code, out = kernel.call(run_plan_cli, [*argv, "--optimizer", "adam"])
    lines = [line for line in out.splitlines() if line.strip() and not line.startswith("measuring ")]
    assert code == 2 and "Traceback" not in out and "usage:" not in out
    assert lines[-1].startswith("python -m snippets.decide: error: ") and message in lines[-1], out
    assert not [line for line in lines if line.startswith("run ")], out  # refused before any measuring run


def test_a_table_made_as_the_refusal_says_is_planned(kernel):
    # The way out the refusal of keras.Variable(array) gives (helper-87 found it for keras-io's Swin) builds without values.
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders_shapes:array_variable", "--model-kwargs",
                                           '{"constant": true}', "--method", "rule", "--optimizer", "adam"])
    assert code == 0 and "Traceback" not in out, out


def test_an_option_value_that_starts_with_a_minus_is_told_to_follow_an_equals_sign(kernel):
    # helper-57: argparse took "-5GiB" for an option and said only "expected one argument".
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:tiny", "--device-memory", "-5GiB"])
    assert code == 2 and out.strip().splitlines()[-1] == (
        'python -m snippets.decide: error: argument --device-memory: expected one argument (a value that starts with '
        '"-" goes after "=": --device-memory=-5GiB)'), out
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:tiny", "--batch"])
    assert code == 2 and out.strip().endswith("argument --batch: expected one argument"), out  # no value: no hint


def test_a_train_step_with_optimizers_of_its_own_and_no_optimizer_is_refused_not_planned_for_inference(kernel):
    # helper-45: a GAN making its optimizers in __init__ compiles none, and was planned for inference with no word of
    # them; helper-51: with a note, a CycleGAN's four own optimizers still got an inference plan (its JSON without the
    # note), of a model that only trains. Refused in one line, before any run; with --optimizer it is measured.
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:gan_with_call", "--strategy", "single"])
    assert code == 2 and "Traceback" not in out and out.strip().splitlines()[-1].endswith(
        "error: tests.plan_builders:gan_with_call: its train_step trains with optimizers of its own (d_optimizer), and the "
        "function compiles no optimizer for fit itself: pass --optimizer, the one your compile hands keras.Model.compile, "
        "whose slots fit builds beside theirs (rmsprop, Keras's default, where it hands none, as keras-io's GAN calls "
        "super().compile()); the runs measure the step with the optimizers it applies"), out
    assert "Planned for INFERENCE" not in out and "measuring" not in out
    # helper-47: one without call() was told to pass --optimizer, which then refused it: the line says what it needs.
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:gan_without_call", "--strategy", "single"])
    last = out.strip().splitlines()[-1]
    assert code == 2 and "pass --optimizer, the one your compile hands keras.Model.compile" in last, out
    assert "; it cannot run yet: NoCallGAN does not say what it takes: its class defines no call()" in last, out


def test_a_step_xla_cannot_compile_is_refused_naming_xla_and_xla_off(kernel):
    # helper-51: keras-io's graph attention network failed XLA's compile under --xla auto; its own train_step was then
    # tried on x alone, and the line gave that error, not XLA's, with no word of --xla off (which planned it).
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:not_xla_compilable", "--strategy", "single",
                                           "--xla", "on", "--batch", "16"])
    assert code == 2 and "Traceback" not in out and out.strip().splitlines()[-1].startswith(
        "python -m snippets.decide: error: XLA could not compile tests.plan_builders:not_xla_compilable's train step "
        "(InvalidArgumentError: tf2xla conversion failed"), out
    assert out.strip().endswith("if your model compiles with jit_compile=False, plan it with --xla off"), out


def test_a_type_error_inside_the_function_is_not_blamed_on_its_arguments(kernel):
    # helper-32: a misspelt argument in a call inside the builder was answered "pass the function's arguments
    # with --model-kwargs"; Python names the function whose call failed, and here it is not the reader's.
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:inner_typo", "--optimizer", "adam"])
    assert code == 2 and out.splitlines()[-1].endswith(
        "failed: TypeError: needs_width() got an unexpected keyword argument 'widht'"), out
    # The reader's own function under another name, or a class, keeps the hint (helper-33).
    for target, callee in (("alias_of_needs_width", "needs_width()"), ("WidthModel", "WidthModel.__init__()")):
        code, out = kernel.call(run_plan_cli, ["--model", f"tests.plan_builders:{target}", "--optimizer", "adam"])
        assert code == 2 and f"TypeError: {callee} missing 1 required positional argument: 'width' (pass the " \
            "function's arguments with --model-kwargs" in out.splitlines()[-1], out


def two_heads_batch() -> dict:
    """Kernel side: the batch the planner makes for a model with a dict of outputs, and one fit step on it."""
    from snippets.lib.model_batch import batch_of
    from snippets.lib.model_step import compiled_loss
    from tests.plan_builders import two_heads

    model = two_heads()
    x, y = batch_of(model, 4, compiled_loss(model))
    model.fit(x, y, epochs=1, verbose=0)
    return {key: (value.shape, str(value.dtype)) for key, value in y.items()}


def test_a_model_with_a_dict_of_outputs_gets_a_target_per_output_from_its_own_loss(kernel):
    assert kernel.call(two_heads_batch) == {"cls": ((4,), "int32"), "reg": ((4, 1), "float32")}


def inputs_batch(name: str):
    """Kernel side: the inputs the planner makes for a builder of tests/plan_builders.py (built as the
    measuring process builds it), and one fit step on them as that process feeds them."""
    import tensorflow as tf

    import tests.plan_builders as builders
    from snippets.lib.model_batch import batch_of, recording_calls
    from snippets.lib.model_step import compiled_loss

    with recording_calls():
        model = getattr(builders, name)()
    x, y = batch_of(model, 4, compiled_loss(model))
    model.fit(tf.data.Dataset.from_tensors((x, y)).repeat(), epochs=1, steps_per_epoch=1, verbose=0)
    shape = lambda a: (tuple(a.shape), str(a.dtype))  # noqa: E731
    return ({k: shape(v) for k, v in x.items()} if isinstance(x, dict) else
            [shape(v) for v in x] if isinstance(x, tuple) else shape(x))


@pytest.mark.parametrize("name, inputs", [
    # A list of inputs goes to tf.data as a tuple (a list would be stacked into one tensor).
    ("two_inputs", [((4, 8, 8, 3), "float32"), ((4, 5), "float32")]),
    # Named inputs by name, token ids as integers.
    ("dict_inputs", {"tokens": ((4, 6), "int32"), "features": ((4, 4), "float32")}),
    # A subclassed model has no keras.Input: what the function called it on, batch and dtype included.
    ("subclassed", ((4, 12), "int32")),
    # Raw text: as many words as its TextVectorization keeps.
    ("text_classifier", ((4, 1), "object")),
    # Lookups with no out-of-vocabulary id (keras-io's TabTransformer, helper-48): an entry of each vocabulary, so fit runs.
    ("closed_lookups", {"color": ((4, 1), "object"), "size": ((4, 1), "int64"), "numbers": ((4, 3), "float32")}),
])
def test_the_batch_has_the_structure_and_dtypes_the_model_takes(kernel, name, inputs):
    assert kernel.call(inputs_batch, name) == inputs


def masked_positions() -> int:
    """Kernel side: how many positions of the planner's batch an ``Embedding(mask_zero=True)`` masks."""
    import keras

    from snippets.lib.model_batch import batch_of

    embedding = keras.layers.Embedding(100, 8, mask_zero=True)
    inputs = keras.Input((6,), dtype="int32")
    model = keras.Model(inputs, keras.layers.GRU(4)(embedding(inputs)))
    x, _ = batch_of(model, 4, "mse")
    return int((~keras.ops.convert_to_numpy(embedding.compute_mask(x))).sum())


def test_the_batch_ids_are_not_the_padding_a_mask_zero_embedding_masks(kernel):
    # Id 0 masked all 24 positions: a step over nothing but padding, not the step a real batch runs.
    assert kernel.call(masked_positions) == 0


def one_row_step() -> tuple[int, float]:
    """Kernel side: the largest id the planner's batch gives a model with a one-row ``Embedding``, and a step's
    loss on that batch."""
    import keras

    from snippets.lib.model_batch import batch_of

    inputs = keras.Input((6,), dtype="int32")
    model = keras.Model(inputs, keras.layers.Dense(1)(keras.layers.Flatten()(keras.layers.Embedding(1, 4)(inputs))))
    model.compile(optimizer="sgd", loss="mse")
    x, y = batch_of(model, 4, "mse")
    return int(x.max()), float(model.train_on_batch(x, y))


def mask_batch() -> tuple[str, bool]:
    """Kernel side: the dtype of the planner's batch for a boolean mask input, and whether it keeps every position."""
    import keras

    from snippets.lib.model_batch import batch_of

    frames, mask = keras.Input((16, 8)), keras.Input((16,), dtype="bool")
    model = keras.Model([frames, mask], keras.layers.Dense(1)(keras.layers.GRU(4)(frames, mask=mask)))
    (_, kept), _ = batch_of(model, 4, "mse")
    return str(kept.dtype), bool(kept.all())


def test_a_boolean_mask_input_is_fed_true_booleans(kernel):
    # helper-81: keras-io's CNN-RNN video classifier's frame mask was fed standard-normal floats.
    assert kernel.call(mask_batch) == ("bool", True)


def test_a_one_row_embedding_gets_the_one_id_it_has(kernel):
    # helper-78: a builder's vocab=1 failed every run on TensorFlow's "indices[0,0] = 1 is not in [0, 1)".
    largest, loss = kernel.call(one_row_step)
    assert largest == 0 and loss >= 0  # the step ran


def text_batch() -> str:
    """Kernel side: the text the planner gives tests/plan_builders.py's text model."""
    from snippets.lib.model_batch import batch_of
    from tests.plan_builders import text_classifier

    return str(batch_of(text_classifier(), 2, None)[0][0, 0])


def test_a_text_input_gets_as_many_words_as_its_vectorizer_keeps(kernel):
    assert kernel.call(text_batch) == " ".join(["word"] * 12)


def test_an_error_says_its_cause_not_its_wrapper():
    from snippets.lib.errors import error_line

    keras_wrapped = ValueError("Exception encountered when calling Functional.call().\n\n\x1b[1mThe structure "
                               "of `inputs` doesn't match\x1b[0m\n\nArguments received by Functional.call():")
    graph = RuntimeError("Graph execution error:\n\nDetected at node Cast defined at (most recent call last):\n"
                         "  File \"x.py\", line 1\n\nCast float to string is not supported\n\t [[{{node Cast}}]]")
    assert error_line(keras_wrapped) == "The structure of `inputs` doesn't match"
    # Nested: a layer's output spec inferred by calling the layer inside it (RematScope reaching attention).
    nested = ValueError("Exception encountered when calling EncoderBlock.call().\n\n\x1b[1mCould not automatically "
                        "infer the output shape / dtype of 'encoder_block_0'. Error encountered:\n\nException "
                        "encountered when calling MultiHeadAttention.call().\n\n\x1b[1mThe custom_gradient decorator "
                        "currently supports keywords arguments only when eager execution is enabled.\x1b[0m\n\n"
                        "Arguments received by MultiHeadAttention.call():\n  • query=tf.Tensor(shape=(None, 256, 64))")
    assert error_line(nested) == ("The custom_gradient decorator currently supports keywords arguments only when eager "
                                  "execution is enabled.")
    assert error_line(graph) == "Cast float to string is not supported"
    assert error_line(ValueError("one line")) == "one line"


def builder_facts(name: str) -> tuple:
    """Kernel side: :func:`snippets.lib.model_source.read_builder` of a builder in tests/plan_builders.py, from the
    policy to ``jit_compile`` (weights, and the optimizer's accumulation and EMA, left out)."""
    import tests.plan_builders as builders

    return model_source.read_builder(getattr(builders, name))[1:7]


def builder_adds_loss(name: str) -> bool:
    """Kernel side: :attr:`snippets.lib.model_source.SourceFacts.adds_loss` of a builder in tests/plan_builders.py."""
    import tests.plan_builders as builders

    return model_source.read_builder(getattr(builders, name)).adds_loss


def builder_step_optimizers(name: str) -> tuple:
    """Kernel side: :attr:`snippets.lib.model_source.SourceFacts.step_optimizers` of a builder in tests/plan_builders.py."""
    import tests.plan_builders as builders

    return model_source.read_builder(getattr(builders, name)).step_optimizers


def builder_tf_step(name: str) -> bool:
    """Kernel side: :attr:`snippets.lib.model_source.SourceFacts.tf_step` of a builder in tests/plan_builders.py."""
    import tests.plan_builders as builders

    return model_source.read_builder(getattr(builders, name)).tf_step


def jax_offered(name: str) -> bool:
    """Kernel side: whether :func:`snippets.decide.measured_plan` lets the plan of a builder in tests/plan_builders.py
    offer ``--backend jax`` (``plan_model``'s ``jax``), the plan itself not made."""
    from unittest import mock

    args = decide.build_parser().parse_args(["--model", f"tests.plan_builders:{name}", "--optimizer", "adam",
                                             "--loss", "mse", "--strategy", "single"])
    weights = decide._weights(args)
    with mock.patch.object(decide.model_plan, "plan_model", lambda *a, **k: k["jax"]):
        return decide.measured_plan(args, weights)


def test_what_the_function_compiles_and_sets_is_read_without_running_it(kernel):
    assert kernel.call(builder_facts, "tiny_sgd") == (None, "huber_loss", "sgd", False, {}, None)
    # compile(loss=...) alone names no optimizer: rmsprop is compile's default, nobody's choice.
    assert kernel.call(builder_facts, "tiny_mixed") == ("mixed_float16", "mse", None, False, {}, None)
    assert kernel.call(builder_facts, "tiny") == (None, None, None, False, {}, None)
    # Named by the slots its settings make: SGD(momentum=0.9) is not --optimizer sgd.
    assert kernel.call(builder_facts, "tiny_sgd_momentum")[2] == "sgd_momentum"
    # AdamW's __init__ reads back what the optimizers' base class keeps (weight_decay).
    assert kernel.call(builder_facts, "tiny_adamw") == (None, "mse", "adamw", False, {}, None)
    assert kernel.call(builder_facts, "own_step_x_only") == (None, None, "adam", True, {}, None)
    # keras-io's endpoint layer adds the loss while the functional model is built, shapes only: fit trains on it.
    assert [kernel.call(builder_adds_loss, name) for name in ("endpoint", "tiny", "returns_another")] == [True, False, False]
    # A train_step of its own with an optimizer of its own, which --optimizer does not replace (helper-45's GAN).
    assert kernel.call(builder_step_optimizers, "gan_with_call") == ("d_optimizer",)
    assert kernel.call(builder_step_optimizers, "tiny") == ()
    # A train_step(data) of its own, which Keras on JAX does not call; compute_loss alone keeps the backend's step.
    assert [kernel.call(builder_tf_step, name) for name in ("own_step_x_only", "distiller", "tiny")] == [True, False, False]
    # Its plan offers no --backend jax then (helper-73: a Siamese network was sent there and refused).
    assert [kernel.call(jax_offered, name) for name in ("own_step_x_only", "tiny", "text_classifier")] == [False, True, False]
    # A loss a layer adds in training only is missed by the build (training unset): seen in a call like fit's.
    assert kernel.call(builder_adds_loss, "adds_loss_in_training") is True
    assert kernel.call(builder_adds_loss, "subclass_adds_loss_in_training") is True  # its input: the batch it was called on
    # Only the returned model's compile is its step's: another model's, compiled on the way, is not.
    assert kernel.call(builder_facts, "returns_another") == (None, None, None, False, {}, None)
    # On a GPU host an LSTM with Keras's default arguments runs cuDNN's kernel, which XLA cannot compile.
    assert kernel.call(builder_facts, "lstm_tagger") == (None, "sparse_categorical_crossentropy (from_logits=True)", None,
                                                         False, {"LSTM": private.CUDNN}, None)
    # jit_compile as the function chose it, by keyword or by position ("auto" is Keras's choice: None).
    assert kernel.call(builder_facts, "tiny_jit_on")[5] is True
    assert kernel.call(builder_facts, "tiny_jit_off")[5] is False
    # Known by its class, not its name: a reader's subclass runs the same kernel.
    assert kernel.call(builder_facts, "custom_lstm_tagger")[4] == {"TaggerLSTM": private.CUDNN}
    # The reader's layer, not its parts (TextVectorization's own StringLookup).
    assert kernel.call(builder_facts, "text_classifier")[4] == {"TextVectorization": private.NO_JIT}


def test_a_model_keras_would_not_compile_with_xla_on_a_gpu_is_planned_without_it():
    from snippets.lib.model_report import model_setup

    setup = model_setup("mse", None, no_xla={"TaggerLSTM": private.CUDNN})
    assert setup.no_xla == {"TaggerLSTM": private.CUDNN} and setup.notes == (
        "Keras compiles no XLA step for this model on a GPU host (TaggerLSTM; an LSTM or GRU runs cuDNN's kernel "
        "there), so it is planned without XLA.",)
    assert model_setup("mse", None, no_xla={"RandomRotation": private.NO_JIT}).notes == (
        "Keras compiles no XLA step for this model on a GPU host (RandomRotation), so it is planned without XLA.",)
    # Asked for, it is said not used (helper-48 read --xla on as dropped without a word).
    assert model_setup("mse", None, no_xla={"RandomZoom": private.NO_JIT}, xla="on").notes[0].startswith(
        "--xla on is not used: Keras compiles no XLA step for this model on a GPU host (RandomZoom)")
    # Keras on JAX jits an LSTM (cuDNN is TensorFlow's reason alone), never a supports_jit=False layer.
    decide.refuse_unjitted_on_jax({"TaggerLSTM": private.CUDNN})
    with pytest.raises(ValueError, match=r"without jit \(RandomRotation: layers it does not compile\)"):
        decide.refuse_unjitted_on_jax({"RandomRotation": private.NO_JIT, "TaggerLSTM": private.CUDNN})
    args = decide.build_parser().parse_args(["--model", "tests.plan_builders:lstm_tagger", "--optimizer", "adam"])
    args.source = model_source.SourceFacts([], None, "mse", None, False, {"LSTM": private.CUDNN}, None)
    for strategy, xla, planned_without in (("single", "auto", True), ("single", "on", True),
                                           ("single", "off", False), ("mirrored", "auto", False)):
        args.strategy, args.xla, args.backend = strategy, xla, "tensorflow"
        # Said only where XLA was asked for and Keras would have compiled the step.
        assert bool(decide.setup_of(args).no_xla) is planned_without, (strategy, xla)


def test_without_optimizer_the_model_trains_with_what_its_source_compiled_or_is_planned_for_inference():
    from snippets.lib import planner
    from snippets.lib.model_source import SourceFacts

    def facts(optimizer, loss):
        return SourceFacts([], None, loss, optimizer, False, {}, None)

    assert decide.source_optimizer(facts("adam", "mse")) == (
        "adam", "No --optimizer: the function compiles with adam, which is measured (that optimizer, its settings "
        "kept).")
    # compile(loss=...) alone: fit trains with compile's default optimizer.
    assert decide.source_optimizer(facts(None, "mse"), "file") == (
        "rmsprop", "No --optimizer: the file's compile_config compiles without naming one, so fit trains with "
        "compile's default, rmsprop, which is measured.")
    assert decide.source_optimizer(facts(None, None)) == (None, None)
    # Keras on JAX (--backend jax) compiles the step, it does not run it.
    assert decide.source_optimizer(facts("adam", "mse"), done="compiled by XLA, not run")[1] == (
        "No --optimizer: the function compiles with adam, which is compiled by XLA, not run (that optimizer, its "
        "settings kept).")
    assert decide.source_optimizer(facts("Lion", "mse"))[0] == "lion"  # a string as the function wrote it
    with pytest.raises(ValueError, match="compiles with Muon, which the planner does not know: pass --optimizer"):
        decide.source_optimizer(facts("Muon", "mse"))
    # Not compiled and no --optimizer: an inference plan, which says so before anything else.
    how = rule_report.rule_how([planner.Weight((3, 3, 8, 8), path="conv/kernel")], inference=True)
    assert how.startswith("Planned for INFERENCE: no --optimizer was given") and "LOWER BOUND" in how


def test_an_inference_plan_says_so_first_and_names_an_unused_loss(kernel):
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:tiny", "--loss", "mse"])
    assert code == 0, out
    assert out.startswith("Planned for INFERENCE: no --optimizer was given")
    assert "--loss mse is not used: an inference plan has no loss (pass --optimizer to plan training)." in out
    assert out.index("--loss mse is not used") < out.index("capacity")  # before the table


def test_a_rule_plan_of_a_model_it_cannot_fully_count_never_says_fits(kernel):
    # An Embedding's activations are not in the rule: under 32 GiB the plan is not known to fit, and it
    # names the one option this command lacks to measure the step.
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:text_classifier", "--optimizer", "adam",
                                           "--method", "rule", "--strategy", "single", "--devices", "1"])
    assert code == 0, out
    assert "Not known to fit: the fullest device (device 0) peaks at at least" in out and "Fits" not in out
    assert out.splitlines()[2].split()[-1] == "unknown"
    assert " ".join(out.split()).endswith("are not counted; measure its training step with --method auto.")
    # Dense layers on every position of a sequence, sharded by column (never measured): the same, by --json.
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:per_position", "--optimizer", "adam",
                                           "--strategy", "column", "--devices", "2", "--json"])
    import json

    planned = json.loads(out[out.index("{"):])
    assert planned["fits"] is None and planned["lower_bound"] is True, out
    # The keys a measured plan's JSON has too: the model and what it trains with.
    assert planned["model"] == "tests.plan_builders:per_position" and planned["setup"]["xla_from"] == "Keras's default"
    assert planned["capacity"] == planned["devices"][0]["capacity"] == 30976 * 2**20
    assert "1 Dense layer(s) that run on every position of a sequence or image" in planned["how"]
    assert planned["how"].endswith("measure its training step with --strategy single or mirrored.")


def test_a_split_of_a_readers_model_holds_what_it_cannot_divide_whole(kernel):
    # tiny: Dense(64) -> Dense(8). Over 3 devices no column divides (64, 8): every weight stays on device 0.
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:tiny", "--optimizer", "adam", "--loss",
                                           "mse", "--strategy", "column", "--devices", "3"])
    assert code == 0, out
    assert ("Every weight is held whole on device 0 (the site's tensor-parallel layers split Dense layers only, "
            "each where 3 divides its split axis, and leave the rest on the default device): this column plan "
            "splits nothing.") in " ".join(out.split())
    # Over 2 devices of a LayoutMap, the 64 and 8 units divide: nothing is held whole, and the JSON says so.
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:tiny", "--optimizer", "adam", "--loss",
                                           "mse", "--strategy", "model_parallel", "--devices", "2", "--json"])
    import json

    assert code == 0 and json.loads(out[out.index("{"):])["held_whole"] is None, out
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:two_heads", "--optimizer", "adam",
                                           "--strategy", "model_parallel", "--devices", "2", "--json"])
    whole = json.loads(out[out.index("{"):])["held_whole"]
    assert code == 0 and whole["on"] == "every device", out
    # The regression head Dense(1) and the 3-class head Dense(3) do not halve; the hidden Dense(32) does.
    assert [w["shape"] for w in whole["weights"]] == [[32, 3], [3], [32, 1], [1]], whole
    assert [w["path"].split("/")[-1] for w in whole["weights"]] == ["kernel", "bias"] * 2, whole


def test_a_keras_on_jax_placement_is_planned_against_jax_pool(kernel):
    # A 6.5 GiB kernel under DataParallel peaks at 26.01 GiB: under TensorFlow's 30.25 GiB, over JAX's
    # default pool of 75% of 32510 MiB (23.81 GiB). The card's JAX pool is what Keras on JAX gets.
    import json

    argv = ["--shape", "65536", "26624", "--optimizer", "rmsprop", "--strategy", "data_parallel", "--json"]
    code, out = kernel.call(run_plan_cli, argv)
    pool = json.loads(out[out.index("{"):])
    assert code == 0 and pool["capacity"] == int(32510 * 2**20 * 0.75) and pool["fits"] is False, out
    assert pool["pool"] == "JAX's default 75% pool"  # the key a measured plan's JSON has too
    # Its remedies stay on JAX: a Keras-on-JAX reader is not sent to a tf.distribute strategy.
    assert {r["strategy"] for r in pool["remedies"]} <= {"data_parallel", "model_parallel"} and pool["remedies"]
    code, out = kernel.call(run_plan_cli, argv + ["--device-memory", "30976MiB"])
    given = json.loads(out[out.index("{"):])
    assert code == 0 and given["fits"] is True and given["pool"] is None, out
    # A TensorFlow placement keeps TensorFlow's allocator.
    code, out = kernel.call(run_plan_cli, [*argv[:-2], "mirrored", "--json"])
    tf = json.loads(out[out.index("{"):])
    assert tf["capacity"] == 30976 * 2**20 and tf["pool"] == "TensorFlow's allocator", out


def test_an_lstm_on_a_keras_on_jax_placement_is_planned_with_xla(kernel):
    # cuDNN keeps TensorFlow's Keras from compiling an LSTM's step; on JAX the LSTM is jitted.
    import json

    plans = {}
    for strategy, devices in (("data_parallel", "2"), ("single", "1")):
        code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:lstm_tagger", "--optimizer", "adam",
                                               "--method", "rule", "--strategy", strategy, "--devices", devices,
                                               "--json"])
        assert code == 0, out
        plans[strategy] = json.loads(out[out.index("{"):])
    assert plans["data_parallel"]["xla"] is True and plans["data_parallel"]["setup"]["no_xla"] == {}
    # On one device TensorFlow's Keras would compile the step, but for the LSTM's cuDNN kernel.
    assert plans["single"]["xla"] is False and "LSTM" in plans["single"]["setup"]["no_xla"]


def test_an_input_of_unknown_length_is_no_obstacle_to_a_rule_plan(kernel):
    # Only a run needs a length (the refusal before any run: test_a_readers_model_that_cannot_be_planned...).
    code, out = kernel.call(run_plan_cli, ["--model", "tests.plan_builders:any_length", "--optimizer", "adam",
                                           "--method", "rule"])
    assert code == 0 and "Planned by rule" in out, out


def test_a_tf_keras_model_is_refused_before_it_is_built():
    # A kernel of its own, so tf_keras is imported there alone (a fork: no TensorFlow import to pay). The refusal
    # comes from reading the module, whatever the method: --method rule, since auto also starts the measuring
    # child, a TensorFlow import this refusal never uses (test_plan_measured holds a refusal with it started).
    with Kernel() as fresh:
        code, out = fresh.call(run_plan_cli, ["--model", "tests.plan_builders_tf_keras:model", "--optimizer", "adam",
                                              "--method", "rule"])
    assert code == 2 and "Traceback" not in out
    assert [line for line in out.splitlines() if line.strip()] == [
        "python -m snippets.decide: error: tests.plan_builders_tf_keras imports tf_keras (Keras 2): the planner "
        "reads Keras 3 models; plan tf_keras with docs/tf-keras.md"]


def test_a_tf_keras_model_built_inside_the_function_is_refused_at_its_import():
    # A module that imports tf_keras only inside its function passes import_callable's check; the
    # import itself is refused, before tf_keras (or any of its weights) exists in the process.
    with Kernel() as fresh:
        code, out = fresh.call(run_plan_cli, ["--model", "tests.plan_builders:tf_keras_inside", "--optimizer", "adam",
                                              "--method", "rule"])  # as above
        imported = fresh.call(_imported, "tf_keras")
    assert code == 2 and "Traceback" not in out and not imported
    assert [line for line in out.splitlines() if line.strip()] == [
        "python -m snippets.decide: error: tests.plan_builders:tf_keras_inside: " + model_source.TF_KERAS_REFUSAL]


def _imported(name: str) -> bool:
    """Kernel side: whether module ``name`` is imported."""
    return name in sys.modules


def test_a_compiled_losss_own_settings_are_named(kernel):
    # helper-41: keras-io's ViT compiles SparseCategoricalCrossentropy(from_logits=True), which read as its name alone.
    assert kernel.call(_loss_words) == [
        "sparse_categorical_crossentropy (from_logits=True)", "mean_squared_error", "mse",
        "out: categorical_crossentropy (from_logits=True, label_smoothing=0.1), aux: mae", "custom"]


def _loss_words() -> list[str]:
    """Kernel side: :func:`snippets.lib.model_batch.loss_name` of losses as a builder compiles them."""
    import keras

    from snippets.lib.model_batch import loss_name

    class Custom(keras.losses.Loss):  # needs an argument: no default to compare with
        def __init__(self, scale):
            super().__init__(name="custom")
            self.scale = scale

    both = {"out": keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1), "aux": "mae"}
    return [loss_name(keras.losses.SparseCategoricalCrossentropy(from_logits=True)),
            loss_name(keras.losses.MeanSquaredError()), loss_name("mse"), loss_name(both), loss_name(Custom(2.0))]
