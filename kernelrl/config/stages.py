"""Stage settings as dataclasses, each field with help text (shown by ``kernelrl recipes show --help-fields``).

A recipe (``recipes/*.yaml``) fills these; anything it leaves out keeps the default here. Defaults are the
paper's values where the paper gives one, scaled down only where a comment says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def knob(default, help: str, **kw):  # noqa: A002 - "help" reads best at the call sites
    """A dataclass field with help text (the trl style: the why lives beside the knob)."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata={"help": help}, **kw)
    return field(default=default, metadata={"help": help}, **kw)


@dataclass
class ModelConfig:
    name_or_path: str = knob(
        "tiny", help="HF model id or local path of the policy; 'tiny' builds a 1.5M-parameter test model locally."
    )
    dtype: str = knob("float32", help="Weights dtype: float32 on CPU (bf16 is slower there), bfloat16 on GPUs.")
    trust_remote_code: bool = knob(False, help="Allow model repos that ship code. Off: a model id is untrusted input.")
    max_prompt_tokens: int = knob(
        2048, help="Prompt budget; exemplars are truncated to fit so the task and instructions always survive."
    )


@dataclass
class EvalConfig:
    device: str = knob("auto", help="cpu, cuda, cuda:N or auto (cuda if available). One device per evaluation.")
    budget_s: float = knob(
        2.0,
        help="Cap on seconds of paired timing per candidate. Timing stops earlier once the score's interval is "
        "tight enough (target_ci); a noisy task uses the whole cap and reports the wider interval's lower bound. "
        "The paper spent 30 min; paired, batched, randomised rounds need seconds (bench/ has the repeatability).",
    )
    correctness_trials: int = knob(
        20, help="Fresh random input sets checked before timing. Paper: 1000 for final scores; fewer for rewards."
    )
    buckets: int = knob(7, help="Diagnostic only: the paper's statistic (median of this many bucket means of the "
                        "per-round ratios) is reported beside the score in timing.bucket_means.")
    target_ci: float = knob(
        0.005, help="Sequential stopping: time until the 95% interval of the median ratio is within this fraction "
        "of the estimate on each side (0.005: +-0.5%), or budget_s is spent. Five evaluations of one candidate then "
        "agree within about 1-2%. 0 always uses the whole budget.")
    min_timing_s: float = knob(
        0.3, help="Time at least this long (and min_rounds) before the interval may stop the rounds: a few early "
        "rounds that happen to agree must not end the measurement.")
    spread_threshold: float = knob(
        0.05,
        help="Relative half-width of the score's interval above which the result is flagged unstable-timing when "
        "the budget ran out. Information only: the score is the interval's lower bound either way, so a noisy "
        "measurement reports less, never more. (The paper discarded runs whose 7 bucket means spread > 0.005.)",
    )
    timeout_factor: float = knob(1000.0, help="A candidate slower than this many reference times is not executable.")
    max_wall_s: float = knob(300.0, help="Absolute cap on one evaluation (compile + check + time), whatever the task.")
    memory_limit_mb: int = knob(8192, help="Address-space limit of the candidate process (host OOM protection).")
    train_mode: bool = knob(True, help="Build both modules in training mode, as KernelBench does; False: eval mode.")
    reverify_above: float = knob(3.0, help="Speedups above this are re-measured (another GPU or a fresh process).")
    reverify_tolerance: float = knob(0.10, help="A re-measurement may be at most this fraction below the first to "
                                     "be accepted (above it is fine: the lower of the two is kept).")
    reverify: bool = knob(True, help="Re-measure speedups above reverify_above in fresh processes (off for tests).")
    min_rounds: int = knob(16, help="At least this many paired spans whatever the budget (an interval needs ranks).")
    max_rounds: int = knob(100000, help="Stop after this many paired spans even if budget remains.")
    target_round_ms: float = knob(
        10.0, help="Calls per timed span (k) are chosen so the reference's span takes about this long: the fixed "
        "round trip and device-wide sync (~0.05 ms, measured and subtracted) and its jitter stay under 1% of it, "
        "per-call jitter averages over k calls, and a pair of spans (reference, candidate) lies within ~25 ms, so "
        "the machine's slow drifts hit both alike.")
    warmup_ms: float = knob(
        100.0, help="Calibration keeps the device busy with the reference's spans at least this long before k is "
        "fixed: an idle GPU runs at a fraction of its clock for the first tens of ms, and a k calibrated then gave "
        "spans of half the target on the H100.")
    warmup_blocks_max: int = knob(
        4, help="Timing starts with warm-up blocks that are not counted: the first always, and the next ones while "
        "either side's spans in it and the previous block spread more than warmup_tolerance, up to this many "
        "blocks (the budget counts from the first counted block). A candidate's first blocks after its "
        "correctness checks ran 10-50x slower on a CPU VM (first touch of the memory its outputs get: ~10 us per "
        "page fault), and one such counted block dragged an identical candidate's lower bound to 0.22. The "
        "candidate gains nothing here: uncounted blocks only delay.")
    warmup_tolerance: float = knob(
        0.10, help="A side counts as warm when its spans in two consecutive blocks all lie within this fraction "
        "of their middle (see warmup_blocks_max).")
    host_probe: bool = knob(
        True, help="Diagnostic: before each timing block the reference times a fixed Python loop and, on CUDA, a "
        "tiny kernel launch on the timing core (outside every clock, ~1 ms); timing.host_probe reports their "
        "median and spread, and rounds_raw each block's values. Tells host-speed states (which move a launch-bound "
        "ratio) apart from GPU noise.")
    heat_ms: float = knob(
        0.0, help="CUDA, experimental: before each timing block the reference worker keeps the GPU busy with "
        "matrix products this long (outside every clock), so the clock governor sees load: with launch-bound "
        "load the H100's SM clock moved between states 1.7x apart within one evaluation, which moves the ratio "
        "of a compute-bound reference to a memory-bound candidate. 0: off.")
    spin_wait: bool = knob(
        True, help="Busy-poll (no sleeping) around each timed span, in the parent and in the worker about to be "
        "timed. A process woken from a blocking read pays the scheduler's wake-up latency, which varies on a "
        "virtual machine and lands on the clock twice per span; and a worker that slept a few ms before its span "
        "(while the parent froze the other side) ran it up to 2x slower on a CPU VM, a bias against whichever "
        "side waited longer. The parent's thread keeps off the timing cores while it spins.")
    estimator: str = knob(
        "hl", help="Centre of the per-pair ratios and its 95% interval: 'hl' (Hodges-Lehmann of the log-ratios with "
        "the Wilcoxon interval: nearly the mean's efficiency, robust to 29% wild pairs) or 'median' (order-statistic "
        "interval of the median: robust to 50%, but needs ~1.5x the pairs for the same width).")
    harness_allowance: float = knob(
        0.2, help="The largest share of the candidate's own span (per block) by which its harness time (staging, "
        "digest) may exceed the reference's without being charged; the reference's harness noise sets the "
        "allowance below that. It is what a cheat that moves work into the harness keeps: at most 1 + this "
        "(1.2x). 1/3 (1.33x) before: a harness patched to precompute a third of its calls while staging measured "
        "estimates 1.3-1.7x honest on a CPU VM; re-scoring 156 honest evaluations (CPU VM and H100) with 0.2 "
        "moved none of their medians and no lower bound by more than 5.3%.")
    clock: str = knob(
        "held", help="What times a span on CUDA (a CPU always uses the parent's clock). 'held' (version 7): a "
        "trusted holder process holds the GPU with a chain of short spin kernels while the worker queues a phase, "
        "then releases it through a semaphore in shared memory and times the phase's GPU work on its own CUDA "
        "events; spans, staging and digests are all held, and a worker that runs during the hold, ends its phase "
        "early or does host work meanwhile is charged (kernelrl/evaluation/held.py). It measures GPU time: host "
        "dispatch is hidden behind the hold and charged only where the candidate's exceeds both the reference's and "
        "its own GPU time. On the H100 VM the GPU-work ratios repeated within 0.4-5% between evaluations where the "
        "host clock's were 16-113% apart (bench/results/2026-11-26-h100-evaluator-v7). 'host': the parent's clock "
        "around the worker's calls and device-wide sync (wall semantics: a launch-bound reference's dispatch "
        "counts), as in version 6. 'device' (experimental, not for rewards): the worker's own CUDA events behind a "
        "spin kernel in its own process, which it can shorten (tests/redteam/cuda/shorten_spin.py).")
    held_span_overhead: bool = knob(
        True, help="clock='held' (version 8): each counted block also times one *empty* held span per side (no "
        "calls: the holder's GO, the worker's wait and DONE, the two context switches), and the smaller side's "
        "median is taken off every span of both sides. On the H100 VM a held span carried ~300 us of such fixed "
        "cost (regressed over k on 15 tasks, 2026-11-26 v8: 230-340 us on the candidate's side), 15-30% of a fast "
        "candidate's 1-2 ms span: scores were understated and moved with k (RMSNorm 3.19 at k=101, 2.49 at k=25). "
        "The candidate cannot raise what is taken off (the smaller of the two medians; its own only lowers it).")
    cuda_graphs: bool = knob(
        True, help="clock='held' (version 9, default on): time both sides' spans as CUDA-graph replays. Each worker "
        "captures one graph per span of its k calls over input buffers (the reference in calibration, the candidate "
        "after its correctness trials, both before any timed values exist), every block's staging refills the "
        "buffers with fresh values, and each replay's outputs are digested and audited as eager ones are. Why: on the "
        "H100 VM the GPU cost of eagerly queued launches differed 1-5% from process to process (stable within one), "
        "the floor of the held clock's repeatability (v8 call 1), while graph replays of the same calls repeated "
        "within 0.1-0.25% across fresh processes (v8 call 2). What it measures: GPU time without the per-launch cost "
        "of eager dispatch, on both sides, so a candidate's own CUDA graph or fewer launches gain less. When either "
        "side cannot be captured (a sync or host read inside forward) both stay eager (timing.graphs says why). On "
        "the H100 (seventh session, 31 tasks): 71% of tasks repeated within 2% over 5 evaluations (5% eager, v8), 90% "
        "agreed with a 10x run within 3%; the CUDA red team passed (16 cases) with it on.")
    held_wall_ratio: float = knob(
        0.0, help="clock='held' (experimental, 0 = off): an evaluation whose reference takes more than this many "
        "times its held GPU time per call on the parent's clock (calibration, before any candidate code runs) "
        "uses the host clock instead (timing.held_off says why). For Python-stepped references (the scaled GRU: "
        "~1.4 s of dispatch for ~9 ms of GPU work a call on the H100 VM), where GPU time alone is a tiny part of "
        "what a user waits for and an honest candidate that synchronizes inside forward (cuDNN's GRU) scored 0.02 "
        "on the held clock. Not yet run on a GPU; 10 would separate that GRU (150x) from launch-bound small "
        "kernels (1-3x).")
    device_spin_factor: float = knob(
        3.0, help="clock='device': the spin kernel before a span lasts this many times the host's queueing time of "
        "the span's calls (+0.2 ms). 1.5 left the GPU waiting for the host in some spans (35% and 76% between "
        "repeats); 3 gave 18 of 20 pairs within 2%. Longer spins cost timing time, not accuracy.")
    hold_factor: float = knob(
        2.0, help="clock='held': the holder's hold before a held phase lasts this many times the host's queueing "
        "time of the phase (the larger side's; +the holder's own queueing, +0.5 ms). Shorter holds starve the GPU "
        "(host gaps land on the clock); longer ones cost wall time: 3x made launch-bound Softmax spans 45 ms for 9 "
        "ms of GPU work on the H100 VM (2026-11-26, evaluations 2-3x longer than on the host clock).")
    spans_per_block: int = knob(
        2, help="Paired spans per block: inputs for all of them are staged once and digested once per block. The "
        "statistics treat a block as the independent unit: on the H100 the spans of one block agreed within ~2% "
        "while the level moved by up to 20% between blocks, so more, smaller blocks average that out (2: ~70% of "
        "the time in timed spans with 10 ms spans; 8 gave ~10 blocks per evaluation and 15% between repeats).")
    digest_sample: int = knob(
        32, help="Calls per block whose outputs are digested (a random sample drawn after the clock; every call's "
        "structure, dtype and shape is checked). A candidate wrong in a share p of calls escapes one block with "
        "probability (1-p)^32.")
    calls_per_span: int = knob(
        0, help="Experimental, not yet measured on a GPU: a fixed k (calls per timed span) instead of calibrating "
        "it per evaluation (0). The held clock's GPU-work ratio moved 0.4-5% between evaluations of one pair while "
        "its interval within one was ~0.5%, and each evaluation had calibrated its own k; a fixed k per task "
        "tests whether that is why. Still capped by the block's memory and, on the held clock, the launch queue.")
    max_calls_per_round: int = knob(
        1024, help="Upper bound on calls per round (also bounded so a block's input and output sets fit in "
        "round_memory_mb).")
    round_memory_mb: int = knob(
        8192, help="Inputs and outputs one worker keeps alive for a block (k x spans_per_block sets). On CUDA at "
        "most a tenth of the GPU's memory (two workers share it): at 2 GB a task with 8 MB inputs and outputs got "
        "k = 10, spans of 1 ms, and noisy ratios. On CPU the sets live in host memory, so this is further capped "
        "to a quarter of what the host or container (cgroup limit) has free and of memory_limit_mb: two workers "
        "stage at once, and a 2 GB evaluator container whose workers staged 2 GB each was OOM-killed mid-timing.")
    min_timeout_s: float = knob(5.0, help="Floor of the per-run time limit (1000x a 10 us reference is too tight).")
    compile_timeout_s: float = knob(600.0, help="Time allowed to import the candidate and build its extensions.")
    load_timeout_s: float = knob(
        30.0, help="Seconds the candidate's load (import, ModelNew(...), weights to the device) may take while no "
        "compiler runs (time with a child process such as ninja/nvcc counts against compile_timeout_s only); at "
        "least 3x the reference's own load. A loop at import time waited out the whole compile allowance (302 s) "
        "where the same loop in forward failed in 8 s.")
    interference_factor: float = knob(
        1.5, help="Flag reference-slowed (fatal when the score is above 1) when the reference's median time in the "
        "paired rounds is this much above its clean baselines (before the candidate existed, and after the rounds "
        "with the candidate frozen). GPU work the candidate leaves queued is drained before every reference round "
        "(quiesce), so this guards against slower, device-wide interference.")
    quiesce_busy_us: float = knob(
        300.0, help="CUDA: before each reference round, a tiny kernel must finish within this many microseconds "
        "(idle latency is ~10-30 us; work queued by another process delays it by a time slice or more).")
    quiesce_limit_s: float = knob(
        2.0, help="CUDA: the longest the reference waits for the device to drain before it is timed anyway (the "
        "wait is recorded; a longer backlog then shows up as reference-slowed).")
    quiesce_poll_us: float = knob(
        0.0, help="CUDA: the sleep between two probes of a quiesce that found the device busy (0: back to back, "
        "version 10; 200 before). The held clock's drain check compares the holder's waits after the candidate's "
        "phases with those after the reference's; with a sleep, a wait just over quiesce_busy_us jumped by the "
        "VM's wake-up time (on the H100 the waits after a block's digests were 250-350 us, at that threshold).")
    graph_span_ms: float = knob(
        10.0, help="clock='held' with cuda_graphs (version 10; 0 = off): before the reference captures its graphs, "
        "raise k so the reference's span holds about this many ms of GPU time (its eager held time per call; "
        "within the block's memory and max_calls_per_round; never lowered). Otherwise k comes from the parent's "
        "clock (target_round_ms), mostly dispatch for a launch-bound reference: graph spans of 0.5-1.5 ms of GPU "
        "time, where a phase's fixed costs (the holder's drain, context switches) weigh more. On the H100 (eighth "
        "session, call 1) 10 took LayerNorm from k = 55-72 to 147 and GELU from 90 to 310, and their drain charges "
        "(2-8% of the score) to 0.")
    threads: int = knob(1, help="CPU threads per worker (OMP_NUM_THREADS): identical for reference and candidate.")
    pin_cpu: bool = knob(
        True, help="Pin both workers of an evaluation to one CPU core (they never run at once): launch-bound GPU "
        "kernels and CPU kernels are then timed on the same core, not on whichever cores the OS picked for two "
        "processes (seen on an H100 host: the same launch-bound candidate 14-27 us per call across processes).")
    spare_workers: int = knob(
        -1, help="Keep this many worker processes per role started ahead (torch imported, device context made; no "
        "task or candidate code) for the next evaluation: saves ~5 s of start-up per evaluation on an H100 host. "
        "Each is used by one evaluation only, and none starts while an evaluation is timed, so with one per role "
        "every other back-to-back evaluation found none ready. -1: 2 on CUDA, 0 on CPU (where a background start "
        "would compete with the timing for the cores); 0: start workers when needed.")
    spare_starters: int = knob(
        3, help="Threads that start spare workers side by side (the most any evaluation of this process asked "
        "for). A held evaluation takes three spares (reference, candidate, holder): with 2 threads, paused while "
        "timing, their replacements (~5 s each) fell behind and on the H100 (eighth session) 35% of warm evaluations "
        "found no holder ready and paid 4-7 s of start-up (433 evaluations per GPU-hour). 3 starts the three "
        "replacements at once.")
    blocking_sync: bool = knob(
        True, help="CUDA: the reference's and the candidate's device contexts sleep in a synchronisation "
        "(CU_CTX_SCHED_BLOCKING_SYNC) instead of spinning. A model that syncs inside forward (.item(), .tolist()) "
        "waits out the held clock's hold in that sync, and a spinning wait is CPU time the host check charges "
        "like host work hidden behind the hold: the MoE seed (one .tolist() a call) scored 0.005-0.008 (30 ms a "
        "call of charge; H100, ninth session). Both sides alike; the holder keeps the default schedule.")
    settle_charges: bool = knob(
        True, help="clock='held': when the interval would stop the rounds while a check charges the candidate "
        "(held.charges), time on to twice min_rounds (within budget_s) first. A charge from a passing disturbance "
        "of the GPU in a few blocks (H100, eighth session: one LayerNorm evaluation in 120 charged 6% for holds "
        "~69 us longer in two slow blocks) is then trimmed by the checks' trimmed mean; a cheat that repeats is "
        "charged as before. Costs wall time only on evaluations that are charged.")
    drain_gap_match: bool = knob(
        False, help="clock='held', experimental (not yet measured on a GPU): before every holder drain that follows "
        "a reference's phase, the parent re-lists and re-stops the (already frozen) candidate, as it does after a "
        "candidate's phase. A test of whether the 30-90 us excess of the waits after the candidate's phases (H100, "
        "eighth session) is the parent's freeze (a /proc listing of a few ms before those waits only) rather than "
        "the candidate's context.")
    keep_rounds: bool = knob(False, help="Keep every round's raw parent-clock times in timing.rounds_raw (analysis).")
    drop_privileges: bool = knob(
        True, help="When root, run the candidate under a fresh unprivileged uid of its own: it cannot signal or "
        "read the reference or the parent, and everything it starts is found by that uid and killed.")
    cache_dir: str = knob("", help="Compile cache (load_inline/Triton) shared across evaluations; default in /tmp.")
    audit_fraction: float = knob(
        0.08, help="Share of timing blocks whose outputs of one random call are fetched whole after the clock and "
        "compared elementwise with the reference's (at least one block per evaluation; every block is also "
        "digest-checked). About 3 audits in a 2 s evaluation of 2-span blocks.")


@dataclass
class SamplerConfig:
    kind: str = knob("bucket", help="Exemplar sampling: bucket (the paper's), island, or random.")
    n_exemplars: int = knob(
        2, help="Exemplars per prompt (N). The paper's runs used 2; its prompt figure shows 4. 0 keeps the "
        "contrastive prompt (instructions, analysis section) with no exemplar; the paper's plain-GRPO ablation is "
        "crl.prompt=plain instead.")
    bucket_width: float = knob(0.1, help="Score bucket width delta-s.")
    temperature: float = knob(1.0, help="Softmax temperature tau over centred bucket means.")
    n_islands: int = knob(4, help="Island sampler: number of islands.")
    migration_interval: int = knob(
        10, help="Island sampler: rounds between reseeding the worse half of islands. A round is one GRPO step in "
        "crl (every task whose prompts the step scored advances) and one search round in optimize/evolve.")


@dataclass
class AugmentConfig:
    teachers: list = knob(
        ["seed-corpus"],
        help="Teacher LLMs: 'seed-corpus' (offline stand-in), an OpenAI-compatible 'http(s)://...#model', or a "
        "local HF model path/id.",
    )
    max_trials: int = knob(20, help="Attempts per task and teacher (paper: 20).")
    target_successes: int = knob(2, help="Stop asking a teacher about a task after this many successes (paper: 2).")
    temperature: float = knob(0.8, help="Teacher sampling temperature.")
    max_new_tokens: int = knob(4096, help="Teacher completion budget; kernels are long.")
    request_timeout_s: float = knob(
        600.0, help="HTTP teachers: seconds one request may take before it counts as failed and is retried "
        "(a 4k-token kernel takes minutes on a busy API; tests set it small).")
    max_retries: int = knob(
        5, help="HTTP teachers: retries of one request on timeouts, 429, 5xx, cut or malformed bodies; after "
        "them the trial is stored as a failed attempt (with the reason) and the stage goes on.")
    retry_backoff_s: float = knob(
        1.0, help="HTTP teachers: delay before the first retry, doubling each time (jittered, capped at 60 s; "
        "a Retry-After header is honoured).")
    teacher_failure_limit: int = knob(
        10, help="A teacher whose endpoint failed this many trials in a row (after its retries) is taken as down "
        "for the rest of the stage: its remaining tasks are skipped and named in the metrics (teachers_down), "
        "instead of costing max_trials x max_retries timeouts per task. Bad code is not a failure here. 0: never.")


@dataclass
class PolicyEvalKnobs:
    """The end-of-stage policy evaluation, the same in sft, selfsup and crl (each section has its own values)."""

    eval_samples_per_task: int = knob(
        2, help="After training, sample the policy this many times per task (augmentation prompt) and evaluate: "
        "the stage's success rate and speedups, measured the same way in every stage. 0 skips it.")
    eval_temperature: float = knob(0.7, help="Sampling temperature of that end-of-stage policy evaluation.")
    eval_max_new_tokens: int = knob(4096, help="Completion budget of that end-of-stage policy evaluation.")
    eval_prompt: str = knob(
        "own", help="Prompt format of that evaluation: own (the prompt the stage trained on: augmentation for sft "
        "and selfsup, crl.prompt for crl), augment, contrastive (exemplars from crl.pool as the stage ended), or "
        "both (augment and contrastive, each reported under by_prompt; the headline numbers are the own format's). "
        "An RL policy scored only on the augmentation prompt is never scored on what it was trained with.")


@dataclass
class SFTConfig(PolicyEvalKnobs):
    epochs: float = knob(3.0, help="Passes over the successful snippets.")
    learning_rate: float = knob(2e-5, help="AdamW learning rate.")
    batch_size: int = knob(4, help="Per-device batch size.")
    grad_accum: int = knob(1, help="Gradient accumulation steps.")
    max_length: int = knob(4096, help="Max tokens of prompt + completion; longer examples are dropped, not cut.")
    lora: bool = knob(True, help="Train LoRA adapters (peft) instead of all weights.")
    lora_r: int = knob(16, help="LoRA rank.")
    lora_alpha: int = knob(32, help="LoRA alpha.")
    save_steps: int = knob(50, help="Checkpoint every N steps so a killed run resumes.")
    seed: int = knob(0, help="Seed for data order and initialisation.")
    gradient_checkpointing: bool = knob(
        True, help="Recompute activations in the backward pass (trl's default): long kernels fit in GPU memory. "
        "Off for tiny models on CPU, where it only costs time (~30%).")
    contrastive_copies: int = knob(
        0, help="Also train on every example under this many contrastive prompts (exemplars drawn from the "
        "store the way crl draws them). The paper trains on the augmentation prompt only (0). A model too small "
        "to generalise across prompt formats (the smoke recipe's tiny one) otherwise never writes code under "
        "crl's prompts, and GRPO gets no reward signal.")


@dataclass
class SelfSupConfig(PolicyEvalKnobs):
    iterations: int = knob(3, help="Generate -> evaluate -> keep successes -> train, this many times.")
    samples_per_task: int = knob(4, help="k samples per task per iteration.")
    temperature: float = knob(1.0, help="Sampling temperature; exploration is the point of this stage.")
    max_new_tokens: int = knob(4096, help="Completion budget.")
    sft: SFTConfig = field(default_factory=SFTConfig, metadata={"help": "Training settings for each iteration."})
    keep_previous: bool = knob(
        False, help="Also train each iteration on this run's earlier successes (SFT data and earlier iterations). "
        "Off is the paper's loop (REINFORCE with 0/1 reward on the fresh samples only); on guards a tiny model "
        "against forgetting tasks it did not solve this time.")


@dataclass
class CRLConfig(PolicyEvalKnobs):
    steps: int = knob(100, help="GRPO optimisation steps.")
    group_size: int = knob(8, help="G: samples per prompt; rewards are normalised within the group.")
    prompts_per_step: int = knob(2, help="Distinct prompts per step (batch = prompts_per_step * group_size).")
    learning_rate: float = knob(1e-6, help="Policy learning rate.")
    epsilon: float = knob(0.2, help="PPO-style clip range of the probability ratio.")
    beta: float = knob(0.04, help="KL penalty to the reference policy (trl's default is 0: we keep the paper's).")
    temperature: float = knob(1.0, help="Sampling temperature.")
    max_completion_length: int = knob(4096, help="Kernels are long: >= 4096 for real recipes (trl defaults to 512).")
    use_vllm: bool = knob(False, help="Generate with vLLM (colocate or server) instead of transformers.")
    vllm_mode: str = knob("colocate", help="colocate: vLLM shares the training GPUs; server: a separate vLLM server.")
    lora: bool = knob(True, help="Train LoRA adapters.")
    save_steps: int = knob(10, help="Checkpoint every N steps (trainer state, optimizer, RNG, exemplar snapshot).")
    seed: int = knob(0, help="Seed.")
    lora_r: int = knob(16, help="LoRA rank (when lora).")
    lora_alpha: int = knob(32, help="LoRA alpha (when lora).")
    gradient_checkpointing: bool = knob(
        True, help="Recompute activations in the backward pass (trl's default): 4k-token completions fit in GPU "
        "memory. Off for tiny models on CPU, where it only costs time.")
    grad_accum: int = knob(1, help="Gradient accumulation steps (batch = prompts_per_step * group_size per step).")
    num_iterations: int = knob(1, help="GRPO updates per generated batch (mu); 1 = on-policy, the ratio stays 1.")
    vllm_gpu_memory_utilization: float = knob(0.3, help="vLLM colocate: share of GPU memory for the engine.")
    vllm_server_url: str = knob("", help="vLLM server mode: base URL of `trl vllm-serve` (default localhost:8000).")
    sampler: SamplerConfig = field(default_factory=SamplerConfig, metadata={"help": "Exemplar sampling."})
    pool: str = knob(
        "run", help="Exemplar pool of the contrastive prompts: run = the candidates this run produced (its augment "
        "successes, i.e. its SFT data, then everything its policies generated), as in the paper; store = every "
        "candidate of the task in the store (teachers and policies of other runs, baselines, bench kernels): runs "
        "sharing a store then feed each other and a later run starts with better exemplars. Either way only "
        "speedups measured on the evaluation's device type count (a CPU speedup is never a GPU prompt's exemplar).")
    prompt: str = knob(
        "contrastive", help="contrastive: the paper's prompt (exemplars with their speedups, the performance "
        "analysis / algorithm design / code sections); plain: the augmentation prompt, no exemplars and no "
        "contrastive instruction (the paper's '1+2+plain GRPO' ablation; the sampler is then unused).")


@dataclass
class BenchConfig:
    levels: list = knob([1, 2, 3], help="KernelBench levels to score.")
    reuse_scores: bool = knob(
        True, help="The bench step reuses final scores of this run stored under the identical protocol, so a killed "
        "bench resumes where it stopped instead of timing every kernel again; reused numbers are labelled (log and "
        "report notes, with their date and evaluator). `kernelrl pipeline run --force` (or --from) sets it false "
        "for the bench it forces: every kernel is measured again.")
    # The final-evaluation protocol's one home: the pipeline's bench step, `kernelrl bench --recipe R` and
    # `kernelrl ablate --recipe R` all read these two (flags override them per invocation).
    correctness_trials: int = knob(1000, help="Correctness inputs per kernel (final-evaluation protocol; the paper: "
                                   "1000).")
    budget_s: float = knob(20.0, help="Timing seconds per kernel in the final evaluation (paper: 20 minutes; raise "
                           "for publication).")
    plots: bool = knob(True, help="Write PNG plots beside the Markdown report.")
    policy_stage: str = knob(
        "auto", help="Whose trained policy the bench stage samples first (its 'trained policy' row): crl, selfsup, "
        "sft, or auto (the last of them that finished in the run); none skips the row. The run's best kernels "
        "and the teachers' best follow as separate, labelled rows.")
    policy_samples_per_task: int = knob(
        4, help="k: samples per task from that policy's final checkpoint (fixed seeds, the stage's eval temperature "
        "and token budget), each scored with this section's final protocol; every sample is a row, so the row's "
        "success rate and mean are those of one sample of the policy, not of the best of many.")
    policy_prompt: str = knob(
        "own", help="Prompt format for those samples: own (the stage's training format), augment, contrastive, or "
        "both (two rows, labelled). Contrastive exemplars come from the run's pool (crl.pool) as it stood when the "
        "stage ended.")
