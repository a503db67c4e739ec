"""The reference against itself on one input set (reference worker's ``rerun`` command): when a candidate's outputs
fail the comparison (a correctness set, or the audited call of a timing block), the parent asks how much the
reference's own outputs vary on the same inputs (correctness.reference_variation), says so beside the verdict, and
passes the set when the candidate is as close as that (compare.within_variation).

Why: a KernelBench self-pair (level 2 77_ConvTranspose3d_Scale_BatchNorm_GlobalAvgPool, the reference against
itself) failed `wrong-output` on the H200 with a relative error norm of 1.92e-4 > 1e-4, and nothing in the result
said whether the reference itself varies that much (bench/results/2026-11-28-h200x2-evaluator-v13d). Both runs here
start from the same model state (parameters and buffers restored: a training-mode BatchNorm updates its running
statistics on every call, and a state that moved between the runs would read as variation).

With ``f64`` the reference measures its own precision on the set instead (evaluator version 17,
compare.within_precision): once in float32 with its random generators moved (a forward that draws answers
otherwise), once through a float64 copy of the model (the inputs upcast exactly), then PRECISION_SAMPLES - 1 times
with the floating inputs moved by an ulp, in float32 and in float64 each: every (float32, float64) pair is one sample
of the float32 answer's error on this problem. Why: a deterministic reference has no run-to-run variation, yet on a
near-cancelling reduction its float32 answer is itself far from the exact one: KernelBench L1 98_KLDivLoss on the
evaluator's "small" inputs (near-uniform distributions) is 13%-140% off its float64 answer (CPU, full size, three
draws), and torch.compile's honest reordering of the sum failed at 2.5e-3 from the reference, past float32's 1e-4
bound (H200, bench/results/2026-11-28-h200x4-kernelbench, c29). One sample is not enough: rounding errors are random;
at 256 x 16384 the reference's error ranged 7e-4 to 1.2e-2 over six draws and an honest reordering's 8e-4 to 4e-3,
so their ratio on one set often exceeds any small factor."""

from __future__ import annotations

import copy

import torch

from kernelrl.evaluation.worker_inputs import draw_inputs, generate, inputs_module, refill_columns
from kernelrl.evaluation.worker_load import flatten_outputs
from kernelrl.evaluation.worker_state import STATE, device

# Model states larger than this are not copied for the runs (a diagnosis must not cost gigabytes): the reply says
# the state was not restored, and the parent reports nothing.
RERUN_STATE_MAX_BYTES = 1024**3


def cmd_rerun(h, _tensors):
    """Run one input set through forward ``runs`` times (default 2), the model's state and random generators
    restored before each run and after the last (the evaluation goes on: the candidate's state has not moved);
    reply with every run's outputs (the caller's sets are small: the host path). The set: a correctness set
    (``seed``, ``variant``), or with ``stage`` = {seed, k, index, replay} call ``index`` of the timing block staged
    from that seed, drawn again as cmd_stage draws it (replayed: into the captured graphs' buffers, which the next
    staging refills anyway)."""
    model, dev = STATE["model"], device()
    own = model.state_dict() if isinstance(model, torch.nn.Module) else {}  # detached views of the model's own
    state = {k: v.clone() for k, v in own.items()}
    if sum(v.numel() * v.element_size() for v in state.values()) > RERUN_STATE_MAX_BYTES:
        return {"ok": True, "restored": False}, []
    # the random generators too: a forward that draws (dropout) would otherwise see other numbers in each run, and
    # the reference's later calls other numbers than the candidate's, whose generators these runs did not advance
    rng = (torch.get_rng_state(), torch.cuda.get_rng_state(dev) if dev.type == "cuda" else None)
    outs, structure = [], []
    with torch.no_grad():
        for _ in range(int(h.get("runs", 2))):
            _restore(own, state, rng, dev)
            inputs = _staged_set(h["stage"], dev) if "stage" in h else \
                draw_inputs(inputs_module(), int(h["seed"]), str(h["variant"]), dev)
            _keep(model(*inputs), outs, structure)
            del inputs
        _restore(own, state, rng, dev)
        reply = {"ok": True, "restored": True, "structure": structure}
        if h.get("f64"):  # 2 * PRECISION_SAMPLES more sets of outputs (_precision_runs), or f64_error saying why not
            n, m = len(outs), len(structure)
            err = _precision_runs(model, h, dev, outs, structure, (own, state, rng))
            if err:
                reply["f64_error"] = err
                del outs[n:], structure[m:]
            _restore(own, state, rng, dev)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return reply, outs


# Samples of the float32 answer's error: the set itself, and this many minus one with perturbed inputs. Why 4:
# with normal errors, a candidate as accurate as the reference exceeds PRECISION_FACTOR x the largest of 4 samples in
# ~3e-4 of sets (a simulation); with 1 sample, in 13% at a factor of 5.
PRECISION_SAMPLES = 4


def _precision_runs(model, h: dict, dev: torch.device, outs: list, structure: list, saved: tuple) -> str:
    """The set in float32 with the random generators moved, then through a float64 copy of the model, then
    PRECISION_SAMPLES - 1 nudged copies of it through the model in float32 and the copy in float64; every run from the
    saved state, and all but the first from the saved generators. Outputs appended to ``outs`` and counted in
    ``structure``. "" when done, else why not (the caller then has no precision to judge by). The copy is dropped
    before returning."""
    own, state, rng = saved
    m64 = inputs = None
    try:
        inputs = _staged_set(h["stage"], dev) if "stage" in h else \
            draw_inputs(inputs_module(), int(h["seed"]), str(h["variant"]), dev)
        m64 = copy.deepcopy(model).double() if isinstance(model, torch.nn.Module) else model
        own64 = m64.state_dict() if isinstance(m64, torch.nn.Module) else {}
        state64 = {k: v.clone() for k, v in own64.items()}
        seed = int(h.get("seed", h.get("stage", {}).get("seed", 0))) ^ 0x5EED
        # first the set in float32 with the random generators elsewhere: a forward that draws (dropout) answers
        # otherwise, and its float64 run's other draws would read as imprecision (compare.within_precision)
        _restore(own, state, rng, dev)
        torch.manual_seed(seed)
        _keep(model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]), outs, structure)
        g = torch.Generator(device=dev).manual_seed(seed)
        for k in range(PRECISION_SAMPLES):
            xs = inputs if k == 0 else [_nudge(x, g) for x in inputs]
            for m, cast, o, st in ((model, False, own, state), (m64, True, own64, state64)):
                if k == 0 and not cast:
                    continue  # the set's own float32 answer is the one the candidate was compared with
                _restore(o, st, rng, dev)
                # fresh copies each run: a forward that writes into its inputs must not change the next run's
                args = [(x.double() if cast and x.is_floating_point() else x.clone())
                        if isinstance(x, torch.Tensor) else x for x in xs]
                _keep(m(*args), outs, structure)
        return ""
    except Exception as e:  # noqa: BLE001 - any failure (an op without float64, memory) only means no answer
        return f"{type(e).__name__}: {e}"[:300] or "failed"
    finally:
        m64 = inputs = None  # noqa: F841 - freed before the evaluation goes on
        if dev.type == "cuda":
            torch.cuda.empty_cache()


def _keep(out, outs: list, structure: list) -> None:
    """One run's outputs appended to the reply (copies: the next run may reuse the model's buffers)."""
    res = flatten_outputs(out)
    structure.append(len(res))
    outs.extend(t.detach().clone() for t in res)


def _nudge(x, g: torch.Generator):
    """A floating input with each element moved down, up, or left, at random, by one unit in the last place (zeros
    stay zero: the structure holds, probabilities stay positive and masks 0 or ~1). Drawn on the input's device."""
    if not (isinstance(x, torch.Tensor) and x.is_floating_point()):
        return x
    step = torch.randint(0, 3, x.shape, generator=g, device=x.device, dtype=torch.int8)
    inf = torch.tensor(float("inf"), dtype=x.dtype, device=x.device)
    y = torch.where(step == 2, torch.nextafter(x, inf), x)
    y = torch.where(step == 0, torch.nextafter(x, -inf), y)
    return torch.where(x == 0, x, y)


def _restore(own: dict, state: dict, rng: tuple, dev: torch.device) -> None:
    for k, v in own.items():
        v.copy_(state[k])
    torch.set_rng_state(rng[0])
    if rng[1] is not None:
        torch.cuda.set_rng_state(rng[1], dev)


def _staged_set(st: dict, dev: torch.device) -> list:
    k, i, seed = int(st["k"]), int(st["index"]), int(st["seed"])
    G = STATE.get("graphs")
    if st.get("replay") and G and G["k"] * len(G["graphs"]) == k:
        refill_columns(G["cols"], STATE["template"], seed, dev, k)
        return list(G["sets"][i])
    return generate(STATE["template"], seed, dev, k)[i]
