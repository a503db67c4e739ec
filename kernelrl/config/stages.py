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


# Evaluator knobs that issue 34 took out of EvalConfig (at most 20 public knobs): each is now a named constant
# beside the code that uses it (with its why), or was deleted with the experiment it switched. A recipe or
# ``--set eval.NAME`` that still names one gets a one-line error (kernelrl/config/recipes.py); a stored job's
# settings that carry one (queued by an older version) are read without it (jobworker.config_from_settings).
REMOVED_EVAL_KNOBS = {
    **{name: "a constant of the evaluator now" for name in (
        "buckets", "min_timing_s", "max_rounds", "target_round_ms", "warmup_ms", "warmup_blocks_max",
        "warmup_tolerance", "host_probe", "spin_wait", "harness_allowance", "held_span_overhead",
        "device_spin_factor", "hold_factor", "spans_per_block", "digest_sample", "max_calls_per_round",
        "round_memory_mb", "min_timeout_s", "quiesce_busy_us", "quiesce_limit_s", "graph_span_ms", "pin_cpu",
        "spare_workers", "spare_starters", "blocking_sync", "settle_charges", "drop_privileges", "audit_fraction")},
    **{name: "an experiment that was not adopted, deleted" for name in (
        "heat_ms", "estimator", "held_wall_ratio", "drain_gap_match", "quiesce_poll_us", "calls_per_span")},
    "keep_rounds": "evaluate(..., keep_rounds=True) now",
}


@dataclass
class EvalConfig:
    """The evaluator's public knobs (at most 20, issue 34), each with its why and the measured best default.
    The protocol's other settings are named constants beside the code that uses them (kernelrl/evaluation)."""

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
    target_ci: float = knob(
        0.005, help="Sequential stopping: time until the 95% interval of the median ratio is within this fraction "
        "of the estimate on each side (0.005: +-0.5%), or budget_s is spent. Five evaluations of one candidate then "
        "agree within about 1-2%. 0 always uses the whole budget.")
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
        "counts), as in version 6; not for rewards since version 7 (a recipe refuses it): the CUDA red team is "
        "kept on 'held' (on 'host' at version 26, 5 of its 22 cases failed, an honest candidate zeroed among them: "
        "bench/results/2026-12-06-h100-kernelbench, c25). 'device' (experimental, not for rewards; a recipe refuses "
        "it): the worker's own CUDA events behind a spin kernel in its own process, which it can shorten "
        "(tests/redteam/cuda/shorten_spin.py).")
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
    threads: int = knob(1, help="CPU threads per worker (OMP_NUM_THREADS): identical for reference and candidate.")
    cache_dir: str = knob("", help="Compile cache (load_inline/Triton) shared across evaluations; default in /tmp.")


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
    batch_size: int = knob(4, help="Examples per (micro-)step, split over the training processes (gpus.train): "
                           "1 and N processes take the same steps (a multiple of N).")
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
    levels: list = knob([1, 2, 3], help="Levels of the suite the bench stage scores: its own, not the recipe's "
                        "top-level `levels` (the training stages'), so a run trained on level 1 is still measured on "
                        "levels 1-3 unless this says otherwise.")
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
