"""Seeded generators of allocation traces, one module per family of PyTorch programs.

    python3 bench/workloads OUTDIR [--family NAME]... [--steps N] [--seed S]

Each family module has FAMILY (its name), DESCRIPTION (one line: what program it models, and from
what), DEFAULT_STEPS, and generate(rec, rng, steps), which drives a common.Recorder with a
random.Random. The list below is the suite bench/fragmentation.py replays.
"""
import importlib

FAMILY_MODULES = [
    "llm_serving", "moe_training", "llm_curriculum", "rl_rollout_train",
    "vision", "diffusion", "detection", "graph_network",
]


def families():
    """{name: module} of every family of the suite, in the suite's order."""
    out = {}
    for name in FAMILY_MODULES:
        try:
            m = importlib.import_module("workloads." + name)
        except ModuleNotFoundError as e:
            if e.name != "workloads." + name:
                raise
            continue  # not written yet
        out[m.FAMILY] = m
    return out
