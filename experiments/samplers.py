"""Does the adaptive ``pass_rate`` sampler give more informative groups than ``uniform``, and does that buy held-out
pass@1 at the same number of steps (and of rollouts)?

The release notes make ``pass_rate`` the recommendation only after a GPU comparison shows more informative groups at
an unchanged held-out pass@1. The simulator's learning model (``platoon.sim.learning``: only informative groups that
a step trains teach anything) answers the question on the ``math`` preset: 2,000 single-turn tasks with a wide spread
of difficulty, so that uniform spends many groups on tasks that are always or never solved.

Writes ``runs/experiments/samplers/`` (``--out``): a run directory per sampler and seed, ``results.csv``,
``results.md`` and ``samplers.png`` (informative share and pass@1 per step). ``--steps`` and ``--seeds`` shorten it.
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from platoon.analysis import load_run  # noqa: E402
from platoon.report import step_rows, summarize  # noqa: E402
from platoon.sim.run import SimRun  # noqa: E402
from platoon.sim.setup import load_sim_config  # noqa: E402

# --- config ------------------------------------------------------------------------------------------------------
args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
args.add_argument("--steps", type=int, default=80)
args.add_argument("--seeds", type=int, default=3)
args.add_argument("--out", type=Path, default=Path("runs/experiments/samplers"))
opts = args.parse_args()
PRESET = "math"
SAMPLERS = ["uniform", "pass_rate"]
QUANTITIES = ["informative_share", "groups_per_hour", "rollouts_per_hour", "pass_at_1_first", "pass_at_1_last"]

# --- seeding: every random outcome of a run derives from train.seed (rollouts, the samplers' decisions) and from the
# entry's seed (the task population, the same in every run), never from a global generator
SEEDS = list(range(opts.seeds))

# --- runs --------------------------------------------------------------------------------------------------------
rows, curves = [], []
for sampler in SAMPLERS:
    for seed in SEEDS:
        path = opts.out / f"{sampler}-seed={seed}"
        if not (path / "checkpoints.jsonl").exists():
            overrides = [f"train.task_sampler={sampler}", f"train.max_training_steps={opts.steps}",
                         f"train.seed={seed}"]
            SimRun.create(load_sim_config(None, preset=PRESET, overrides=overrides), path,
                          log=lambda level, message: None).run()
        run = load_run(path)
        s = summarize(run)
        steps = step_rows(run)
        informative = steps["train/batch/informative_groups"].sum()
        rollouts = steps["train/rollouts"].sum()
        rows.append({"sampler": sampler, "seed": seed, **s, "informative_groups": informative,
                     "pass_at_1_gain_per_100k_rollouts": (s["pass_at_1_last"] - s["pass_at_1_first"]) / rollouts * 1e5})
        evals = run.metrics[["step", "eval/pass@1"]].dropna()
        curves += [{"sampler": sampler, "seed": seed, "step": int(r.step), "pass@1": r["eval/pass@1"]}
                   for _, r in evals.iterrows()]
        curves += [{"sampler": sampler, "seed": seed, "step": int(r.step),
                    "informative_share": r["train/sampler/informative_share"]} for _, r in steps.iterrows()]

# --- results -------------------------------------------------------------------------------------------------------
table = pd.DataFrame(rows)
table.to_csv(opts.out / "results.csv", index=False)
cols = QUANTITIES + ["informative_groups", "pass_at_1_gain_per_100k_rollouts"]
means = table.groupby("sampler")[cols].mean().loc[SAMPLERS]
lines = ["| sampler | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
for sampler, row in means.iterrows():
    lines.append(f"| {sampler} | " + " | ".join(f"{row[c]:.4g}" for c in cols) + " |")
ratio = means.loc["pass_rate"] / means.loc["uniform"]
lines.append("| pass_rate / uniform | " + " | ".join(f"{ratio[c]:.3f}" for c in cols) + " |")
text = f"Means over {len(SEEDS)} seeds of {opts.steps} steps of {PRESET}.\n\n" + "\n".join(lines) + "\n"
(opts.out / "results.md").write_text(text)
print(text)

# --- plot ----------------------------------------------------------------------------------------------------------
c = pd.DataFrame(curves)
fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
for sampler in SAMPLERS:
    mine = c[c.sampler == sampler]
    share = mine.dropna(subset=["informative_share"]).groupby("step")["informative_share"].mean()
    top.plot(share.index, share.rolling(5, min_periods=1).mean(), label=sampler)
    p1 = mine.dropna(subset=["pass@1"]).groupby("step")["pass@1"].mean()
    bottom.plot(p1.index, p1.values, marker="o", label=sampler)
top.set(ylabel="informative share (5-step mean)", title=f"pass_rate vs uniform on {PRESET}")
bottom.set(xlabel="step", ylabel="held-out pass@1")
top.legend()
fig.tight_layout()
fig.savefig(opts.out / "samplers.png", dpi=100)
print(f"wrote {opts.out / 'results.md'} and {opts.out / 'samplers.png'}")
