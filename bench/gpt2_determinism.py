"""GPT-2 small (random init, fixed seed, deterministic algorithms) trained for a few steps under one
allocator; prints each step's loss exactly (as a hexadecimal float), so two allocators can be compared
bit for bit.

    python3 bench/gpt2_determinism.py --allocator tidepool --steps 50 --json losses.json
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
parser = argparse.ArgumentParser()
parser.add_argument("--allocator", choices=["native", "tidepool"], required=True)
parser.add_argument("--steps", type=int, default=50)
parser.add_argument("--json")
args = parser.parse_args()

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
import torch  # noqa: E402

if args.allocator == "tidepool":
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import tidepool.torch as tt
    tt.enable()

from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

torch.manual_seed(1234)
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
model = GPT2LMHeadModel(GPT2Config()).to("cuda")
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
generator = torch.Generator(device="cpu").manual_seed(99)
losses = []
for step in range(args.steps):
    length = 128 + (step * 37) % 384  # varying shapes, as real batches have
    ids = torch.randint(0, 50257, (8, length), generator=generator).to("cuda")
    out = model(input_ids=ids, labels=ids)
    optimizer.zero_grad(set_to_none=True)
    out.loss.backward()
    optimizer.step()
    losses.append(float(out.loss.detach()).hex())
print(args.allocator, losses[0], losses[-1])
if args.json:
    with open(args.json, "w") as f:
        json.dump({"allocator": args.allocator, "losses": losses}, f)
