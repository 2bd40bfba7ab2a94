"""Does returning each rollout's permit as it ends (``permit_release: rollout``) beat holding a group's permits until
its slowest rollout ends (``group``, platoon 0.3) on a long agentic workload, and at what cost in staleness?

The release notes leave this to a GPU comparison. Here the simulator answers it on the ``long-agentic`` preset
(multi-minute, heavy-tailed rollouts, 256 permits, groups of 8), at ``max_staleness`` 1 and 2 (raising it by one is
the notes' answer to stale groups): idle permits, throughput, trainer idle time, staleness, stale groups and the
rollouts they wasted, and held-out pass@1 after the same number of steps.

Writes ``runs/experiments/permit_release/`` (``--out``): a run directory per point and seed, ``results.csv``,
``results.md`` and ``permit_release.png``. ``--steps`` and ``--seeds`` make it shorter.
"""

import argparse
import itertools
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from platoon.analysis import load_run  # noqa: E402
from platoon.report import summarize  # noqa: E402
from platoon.sim.run import SimRun  # noqa: E402
from platoon.sim.setup import load_sim_config  # noqa: E402

# --- config ------------------------------------------------------------------------------------------------------
args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
args.add_argument("--steps", type=int, default=100)
args.add_argument("--seeds", type=int, default=3)
args.add_argument("--out", type=Path, default=Path("runs/experiments/permit_release"))
opts = args.parse_args()
PRESET = "long-agentic"
GRID = {"train.permit_release": ["group", "rollout"], "train.max_staleness": [1, 2]}
QUANTITIES = ["permit_busy_share", "rollouts_per_hour", "groups_per_hour", "trainer_idle_share", "staleness_mean",
              "stale_groups", "hours", "pass_at_1_last"]

# --- seeding: every random outcome of a run derives from train.seed (rollouts, samplers) and from the entry's
# seed (the task population, fixed here), never from a global generator: one list of run seeds is all there is
SEEDS = list(range(opts.seeds))

# --- runs --------------------------------------------------------------------------------------------------------
rows = []
for values in itertools.product(*GRID.values()):
    point = dict(zip(GRID, values, strict=True))
    for seed in SEEDS:
        name = "-".join(f"{k.split('.')[-1]}={v}" for k, v in point.items()) + f"-seed={seed}"
        path = opts.out / name
        if not (path / "checkpoints.jsonl").exists():
            overrides = [f"{k}={v}" for k, v in point.items()] + [f"train.max_training_steps={opts.steps}",
                                                                   f"train.seed={seed}"]
            SimRun.create(load_sim_config(None, preset=PRESET, overrides=overrides), path,
                          log=lambda level, message: None).run()
        rows.append({**{k.split(".")[-1]: v for k, v in point.items()}, "seed": seed,
                     **summarize(load_run(path)), "run": name})

# --- results -------------------------------------------------------------------------------------------------------
table = pd.DataFrame(rows)
table.to_csv(opts.out / "results.csv", index=False)
means = table.groupby(["permit_release", "max_staleness"])[QUANTITIES].mean()
base = means.loc[("group", 1)]
lines = ["| permit_release | max_staleness | " + " | ".join(QUANTITIES) + " |",
         "|---|---:|" + "---:|" * len(QUANTITIES)]
for (release, k), row in means.iterrows():
    cells = [f"{row[q]:.3g} ({row[q] / base[q]:.2f}x)" if base[q] else f"{row[q]:.3g}" for q in QUANTITIES]
    lines.append(f"| {release} | {k} | " + " | ".join(cells) + " |")
text = (f"Means over {len(SEEDS)} seeds of {opts.steps} steps of {PRESET}; ratios against group at "
        f"max_staleness 1.\n\n" + "\n".join(lines) + "\n")
(opts.out / "results.md").write_text(text)
print(text)

# --- plot ----------------------------------------------------------------------------------------------------------
fig, axes = plt.subplots(1, 3, figsize=(13, 4))
labels = [f"{r}\nk={k}" for r, k in means.index]
for ax, q, title in zip(axes, ["permit_busy_share", "groups_per_hour", "staleness_mean"],
                        ["permit busy share", "trained groups per simulated hour", "staleness of trained groups"],
                        strict=True):
    ax.bar(labels, means[q], color=["tab:orange" if r == "group" else "tab:blue" for r, _ in means.index])
    ax.set_title(title)
fig.suptitle(f"permit_release on {PRESET} ({opts.steps} steps, {len(SEEDS)} seeds)")
fig.tight_layout()
fig.savefig(opts.out / "permit_release.png", dpi=100)
print(f"wrote {opts.out / 'results.md'} and {opts.out / 'permit_release.png'}")
