"""bench/smoke_learning.py's statistics on made-up data (the run itself is a ~40-minute benchmark): the check
passes on an effect well above seed-to-seed noise, and fails honestly on noise, on an effect carried by one task
(the earlier check's memorised 95x kernel), and on an effect too small against the noise."""

from __future__ import annotations

from bench.smoke_learning import learning_stats, task_scores

TASKS = ("L1/a", "L1/b", "L2/c", "L3/d")


def _seeds(selfsup: dict, crl: dict, jitter=(0.0, 0.05, -0.05)) -> dict:
    """Three seeds; each task's selfsup samples are [x, x] and crl's [y, y] speedups (plus a per-seed shift)."""
    out = {}
    for i, j in enumerate(jitter):
        out[str(i)] = {t: {"selfsup": [selfsup[t] + j] * 2, "crl": [max(crl[t] + j, 0.0)] * 2} for t in TASKS}
    return out


def test_task_scores_weigh_tasks_alike_and_count_failures_as_zero():
    s = task_scores({"t": {"selfsup": [1.0, 0.0], "crl": [95.0, 95.0]}, "u": {"selfsup": [0.5], "crl": [1.0]}})
    assert s["t"] == {"selfsup": 1.0 / 95 / 2, "crl": 1.0} and s["u"] == {"selfsup": 0.5, "crl": 1.0}
    assert task_scores({"t": {"selfsup": [0.0], "crl": [0.0]}})["t"] == {"selfsup": 0.0, "crl": 0.0}


def test_a_clear_effect_on_every_task_passes():
    r = learning_stats(_seeds({t: 1.0 for t in TASKS}, {t: 2.0 for t in TASKS}))
    assert all(r["claims"].values()), r["claims"]
    assert r["ci95"][0] > 0 and r["effect_over_noise"] >= 2


def test_noise_alone_fails():
    r = learning_stats({str(i): {t: {"selfsup": [1.0 + d], "crl": [1.0 - d]} for t in TASKS}
                        for i, d in enumerate((0.2, -0.2, 0.1))})
    assert not r["claims"]["interval_excludes_zero"]


def test_an_effect_carried_by_one_task_fails():
    """The old check's failure mode: one task's memorised 95x kernel, the others unchanged or a little worse."""
    sel = {t: 1.0 for t in TASKS}
    crl = {**{t: 0.9 for t in TASKS}, "L1/a": 95.0}
    r = learning_stats(_seeds(sel, crl))
    assert not r["claims"]["holds_without_any_single_task"] and r["leave_one_task_out"]["L1/a"] < 0


def test_a_small_effect_against_large_seed_noise_fails():
    """crl a little faster on every task, but selfsup's own success swings between seeds by more than that."""
    selfsup = ([1.0, 1.0], [1.0, 0.0], [1.0, 1.0])
    r = learning_stats({str(i): {t: {"selfsup": sel, "crl": [1.1, 1.1]} for t in TASKS}
                        for i, sel in enumerate(selfsup)})
    assert r["seed_noise_sd"] > 0.2 and 0 < r["mean_effect"] < 2 * r["seed_noise_sd"]
    assert not r["claims"]["effect_at_least_2x_seed_noise"] and not r["claims"]["interval_excludes_zero"]


def test_gpu_learning_reports_success_and_reward_with_intervals_per_policy():
    """bench/gpu_learning.py (issue 30 item 7): sampling seeds in place of training seeds, plus per-policy success
    rate and mean reward with a t-interval over seeds and a pooled Wilson interval."""
    from bench.gpu_learning import analyse, per_task_speedups, wilson

    def seed(crl_fast: int):  # 4 samples per task: crl writes the 3x kernel crl_fast times, selfsup once
        d = {}
        for fmt in ("contrastive", "augment"):
            d[fmt] = {"selfsup": {t: [3.0, 1.0, 0.0, 1.0] for t in TASKS},
                      "crl": {t: [3.0] * crl_fast + [1.0] * (4 - crl_fast) for t in TASKS}}
        return d

    a = analyse({"1": seed(3), "2": seed(2), "3": seed(4)})
    c = a["contrastive"]
    assert c["claims"]["interval_excludes_zero"] and c["mean_effect"] > 0
    s, k = c["policies"]["selfsup"], c["policies"]["crl"]
    assert s["success_rate"][0] == 0.75 and s["success_pooled"][:2] == [9 * len(TASKS), 12 * len(TASKS)]
    assert k["success_rate"][0] == 1.0 and k["mean_reward"][0] > s["mean_reward"][0] == 1.25
    lo, hi = k["mean_reward"][1:]
    assert lo < k["mean_reward"][0] < hi  # three different seeds: a real interval
    p, lo, hi = wilson(9, 12)
    assert p == 0.75 and 0.45 < lo < 0.75 < hi < 0.95
    rep = {"sources": [{"label": "crl contrastive", "rows": [
        {"task_key": "t", "speedup": 2.0, "success": True}, {"task_key": "t", "speedup": 0.0, "success": False}]}]}
    assert per_task_speedups(rep, "crl contrastive") == {"t": [2.0, 0.0]}
