"""What each key of ``python -m snippets.decide --model ... --json`` holds, for a measured, interpolated,
extrapolated or compiled plan: :func:`snippets.lib.model_report.model_json` writes those keys, and
docs/decide.md prints this legend, which tests/test_model_plan.py holds to them (a key added to the output without
its line here fails).
"""

from snippets.lib import model_plan

#: What each key of a measured, interpolated, extrapolated or compiled plan's ``--json`` holds
#: (:func:`snippets.lib.model_report.model_json`), and, under ``plan.``, each key of
#: :func:`snippets.lib.model_report.plan_json`. Figures are bytes,
#: per device, where they are bytes. docs/decide.md prints it; tests/test_model_plan.py holds it to the keys.
JSON_KEYS = {
    "model": "the --model function or the --model-json file",
    "method": '"measured", "interpolated", "extrapolated" or "compiled": how the step peak was obtained',
    "how": "that, in a sentence or two (the text's)",
    "plan": "the plan's own figures, the plan.* keys",
    "setup": ("what the step trains with (loss, dtype policy, XLA mode), where each came from, and notes; tf_step: "
              "the model's own train_step takes its batch alone, which Keras on JAX does not call"),
    "capacity": ("what each device's pool gives less 128 MiB (half of a pool under 256 MiB), bytes: its allocator can "
                 "hand a tensor a whole chunk (hardware.usable_bytes)"),
    "fits": ("whether the larger of plan.init_peak and plan.step_peak is within capacity; null (not known) where it is over "
             "only by what is counted high: past the largest run, the growth of plan.square's tensors as if all were live "
             "at once, or under a 16-bit policy, more than its best case on a GPU (the bytes that grow with the batch "
             "halved)"),
    "card": "the card planned for; null when --device-memory gave the capacity",
    "pool": "what capacity is of the card: TensorFlow's allocator, or JAX's default 75% pool; null with --device-memory",
    "largest_batch": ("the largest global batch (samples per step, all replicas) within capacity: the one the plan is "
                      "for, --device-memory's or the card's (there also largest_global_batch's figure for it)"),
    "largest_batch_note": ("why largest_batch stops where it does (no line past the largest run holds), or that it lies "
                           "past the batches the line was checked at; empty if neither (the text's sentence)"),
    "largest_global_batch": ("per card (the four the text lists, and the one planned for), the largest global batch "
                             "(samples per step, all replicas) its own pool holds"),
    "largest_global_batch_note": ("why the cards' batches stop where they do, or that they lie past the batches the "
                                  "line was checked at; empty if neither (the text's sentence after them)"),
    "line_checked_per_device": ("the per-device batch the line was checked up to (the benchmarks', or a larger batch "
                                "this plan ran; a compiled plan's largest; under a 16-bit policy, its largest run)"),
    "remedies": "the remedies that fit, smallest change first: label, peak (bytes), how, cost, estimate",
    "remedies_note": "only when no batch fits: why, and what must shrink instead (the text's sentence)",
    "precision_note": ("where it does not fit a float32 step: why mixed precision is not among the remedies (its best "
                       "case does not fit either; the text's sentence); empty otherwise"),
    "strategy_note": ("where an XLA-compiled step on TensorFlow does not fit: why MirroredStrategy is not among the "
                      "remedies (a strategy compiles no XLA step) and the command that plans it; empty otherwise"),
    "fits_note": "where it fits: why that is not certain (the text's sentences); where it does not, that a run may "
                 "complete within the pool itself, when the peak is there; where it is not known (fits null), why; empty "
                 "if nothing makes it so",
    "caveats": "what the CPU emulation could not show",
    "plan.step": ("the configuration planned (batch: the global batch; loss: --loss where the step uses it, null where "
                  "the function's compile gives the loss, which setup.loss names; xla: \"on\" in a compiled plan, since "
                  "Keras on JAX jits the step, where setup.xla keeps the --xla mode asked for)"),
    "plan.method": "as method",
    "plan.how": "as how",
    "plan.batches": "the per-device batches run (compiled, for a compiled plan)",
    "plan.peaks": "each of those batches' step peak, bytes (run: the worst step of its runs)",
    "plan.per_sample": ("bytes per sample per device: the slope of the line highest at the reader's batch, before margins "
                        "(an interpolated step_peak lies on the chord between two runs, not on this line)"),
    "plan.intercept": "that line at batch 0, bytes, before margins: a fit's, which can sit below the weights and slots",
    "plan.floors": ("each batch's lower-quartile step, bytes: a line's slope is at most "
                    f"{model_plan.SLOPE_CAP:g}x the slope between them, or between its thread count's own where steeper "
                    "(at least the rule's); empty if compiled"),
    "plan.jit": "whether the step is XLA-compiled, as a GPU host resolves --xla auto",
    "plan.init_peak": "the allocator's peak while the model is built, bytes; null for a compiled plan",
    "plan.step_peak": "the planned step peak at the reader's batch, bytes, with the margins of a measured plan",
    "plan.weights_bytes": "the model's variables, bytes",
    "plan.seconds_per_step_cpu": "one step's wall time at the largest batch run, on this CPU; null if compiled",
    "plan.steps_run": "the fewest and the most steps a run took; empty if compiled",
    "plan.faster": ("[batch, peak, line] when 3 steps in 4 at the reader's own batch (peak: their lower quartile; compiled: "
                    "its figure) peaked above the line through the smaller runs by more than the margin (the peak grows faster "
                    "than linearly: no larger batch is planned); empty if not"),
    "plan.confirmed": ("a compiled plan's [batch, peak] per device compiled to check the largest batch that fits "
                       "plan.confirmed_for (the largest batch offered for it is the largest of these, or of "
                       "plan.batches, that fits); empty if none"),
    "plan.confirmed_for": ("the capacity plan.confirmed checked, bytes per device (a check that failed to compile: "
                           "plan.confirm_failed); null if none"),
    "plan.square": ("the step's tensors whose bytes grew as the square of the batch or faster between its first two runs: "
                    "bytes per sample squared (per_square), [power, bytes per sample to it] for each higher power (higher), "
                    "how many (tensors), the largest's name, op:index (largest); past the largest run their growth is "
                    "added, as if all were live at once, without margin; null if none"),
    "plan.confirm_failed": ("the batch per device a check failed to compile at, and its error, in one line (only "
                            "compiled batches are offered for plan.confirmed_for); null if none"),
    "plan.checked": ("a compiled plan's [batch, peak] per device compiled at the cards' largest batches read off its figures, "
                     "or past the largest compiled where it fits a card with room (three rounds at most); empty if none"),
    "plan.accumulated": ("a compiled plan that does not fit: [k, peak] per device of the step with "
                         "gradient_accumulation_steps=k compiled at the batch over k, smallest k first; empty if none"),
    "plan.accumulator_extra": ("a run plan that does not fit: bytes the step with gradient_accumulation_steps=2 peaked "
                               "above it at its first batch, 1 where it peaked no higher (the remedy adds at least one "
                               "accumulator per trainable variable); null if not run"),
}
