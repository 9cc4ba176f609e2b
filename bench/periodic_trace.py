"""A synthetic training loop whose shapes take turns, as a trace for the simulated device.

    python3 bench/periodic_trace.py OUT.csv.gz [--seed N] [--periods 6]

A convolutional network's allocations, modelled: weights, then per step, for a batch size from a
schedule of seven (16 to 64, in the order bench/train.py's resnet50 uses), a forward pass that keeps
one activation per layer and frees a workspace per layer, a backward pass that frees the activations
in reverse and passes a gradient down, gradients and optimizer state made at the first step and kept,
and a few optimizer temporaries. Layer widths are drawn at random from --seed. The first period (seven
steps) is the warm-up: a period repeats exactly, so an allocator that has settled makes no driver call
after it.

Writes OUT (tidepool's trace CSV, traces/README.md) and OUT's name with .json for .csv.gz: the trace
line where each step begins and the warm-up's length, which bench/calls_by_step.py reads.
"""
import argparse
import gzip
import json
import random

BATCHES = [16, 24, 32, 40, 48, 56, 64]
LAYERS = 50


class Trace:
    def __init__(self, f):
        self.f, self.next_id, self.lines = f, 1, 0
        f.write("op,id,size,stream\n")

    def alloc(self, size):
        size = (size + 511) // 512 * 512  # as PyTorch rounds requests
        block = (self.next_id, size)
        self.f.write("a,%d,%d,0\n" % block)
        self.next_id += 1
        self.lines += 1
        return block

    def free(self, block):
        self.f.write("f,%d,%d,0\n" % block)
        self.lines += 1


def write(path, seed, periods):
    rng = random.Random(seed)
    widths = [rng.choice([1, 2, 3, 4, 6, 8, 12, 16]) * 50176 * rng.choice([1, 2, 4]) for _ in range(LAYERS)]
    params = [rng.choice([1, 4, 9, 16, 36]) * 4096 * rng.choice([1, 2, 4, 8]) for _ in range(LAYERS)]
    order = [BATCHES[(i * 3) % len(BATCHES)] for i in range(len(BATCHES))] * periods
    steps = []
    with gzip.open(path, "wt") as f:
        t = Trace(f)
        for p in params:
            t.alloc(p)
        kept = None
        for batch in order:
            steps.append(t.lines)
            activations = []
            for w in widths:
                workspace = t.alloc(batch * w // 8)
                activations.append(t.alloc(batch * w // 4))
                t.free(workspace)
            t.free(t.alloc(512))  # the loss
            grad = t.alloc(batch * widths[-1] // 4)
            first = kept is None
            kept = [] if first else kept
            for layer in reversed(range(LAYERS)):
                below = t.alloc(batch * widths[layer] // 4)
                t.free(activations[layer])
                t.free(grad)
                grad = below
                if first:
                    kept.append(t.alloc(params[layer]))  # the weight's gradient
            t.free(grad)
            if first:
                kept += [t.alloc(p) for p in params]  # optimizer state
            for temp in [t.alloc(p) for p in params[:10]]:
                t.free(temp)
    return {"step_begins_at_line": steps, "warmup_steps": len(BATCHES), "seed": seed}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="the trace to write (.csv.gz)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--periods", type=int, default=6)
    args = ap.parse_args()
    if not args.out.endswith(".csv.gz") or args.periods < 2:
        ap.error("OUT must end in .csv.gz, and --periods be 2 or more (the first is the warm-up)")
    steps = write(args.out, args.seed, args.periods)
    with open(args.out[:-len(".csv.gz")] + ".json", "w") as f:
        json.dump(steps, f)


if __name__ == "__main__":
    main()
