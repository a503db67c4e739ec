"""The reference against itself on one input set (reference worker's ``rerun`` command): when a candidate's outputs
fail the comparison (a correctness set, or the audited call of a timing block), the parent asks how much the
reference's own outputs vary on the same inputs (correctness.reference_variation), says so beside the verdict, and
passes the set when the candidate is as close as that (compare.within_variation).

Why: a KernelBench self-pair (level 2 77_ConvTranspose3d_Scale_BatchNorm_GlobalAvgPool, the reference against
itself) failed `wrong-output` on the H200 with a relative error norm of 1.92e-4 > 1e-4, and nothing in the result
said whether the reference itself varies that much (bench/results/2026-11-28-h200x2-evaluator-v13d). Both runs here
start from the same model state (parameters and buffers restored: a training-mode BatchNorm updates its running
statistics on every call, and a state that moved between the runs would read as variation)."""

from __future__ import annotations

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
            res = flatten_outputs(model(*inputs))
            structure.append(len(res))
            outs.extend(t.detach().clone() for t in res)
            del inputs
        _restore(own, state, rng, dev)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return {"ok": True, "restored": True, "structure": structure}, outs


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
